/* Hugging Face config.json -> architecture. Every field is read through one
 * helper that checks presence, type and a sane range, so every error names
 * the field. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/model_internal.h"

typedef struct {
    json_t *root;
    const char *model_type;
    ferry_errbuf_t *err;
} cfg_t;

/* Hard limits: far above any real model, low enough that products of them
 * cannot overflow 64 bits. */
#define LIM_DIM (1ll << 20)     /* hidden, intermediate, lora ranks, head dims */
#define LIM_VOCAB (1ll << 24)
#define LIM_HEADS 4096
#define LIM_EXPERTS 8192

static ferry_status_t get_int(cfg_t *c, const char *key, bool required, int64_t dflt, int64_t lo,
                              int64_t hi, int64_t *out) {
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                              "config.json (model_type %s): required field \"%s\" is missing",
                              c->model_type, key);
        *out = dflt;
        return FERRY_OK;
    }
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) >= -9e15 && json_real_value(v) <= 9e15 &&
               json_real_value(v) == (double)(int64_t)json_real_value(v)) {
        /* range first: converting an out-of-range double to int64 is undefined */
        x = (int64_t)json_real_value(v); /* 4096.0 is accepted as 4096 */
    } else {
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): field \"%s\" must be an integer", c->model_type,
                          key);
    }
    if (x < lo || x > hi)
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): \"%s\" = %lld is outside [%lld, %lld]",
                          c->model_type, key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return FERRY_OK;
}

static ferry_status_t get_bool(cfg_t *c, const char *key, bool dflt, bool *out) {
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return FERRY_OK;
    }
    if (!json_is_boolean(v))
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): field \"%s\" must be true or false",
                          c->model_type, key);
    *out = json_is_true(v);
    return FERRY_OK;
}

static ferry_status_t get_str(cfg_t *c, const char *key, const char **out) {
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        *out = NULL;
        return FERRY_OK;
    }
    if (!json_is_string(v))
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): field \"%s\" must be a string", c->model_type,
                          key);
    *out = json_string_value(v);
    return FERRY_OK;
}

#define TRY(expr)                              \
    do {                                       \
        ferry_status_t st_ = (expr);           \
        if (st_ != FERRY_OK) return st_;       \
    } while (0)

static ferry_status_t read_common(cfg_t *c, const ferry_model_options_t *opts, ferry_arch_t *a) {
    TRY(get_int(c, "hidden_size", true, 0, 1, LIM_DIM, &a->hidden_size));
    TRY(get_int(c, "num_hidden_layers", true, 0, 1, FERRY_MAX_LAYERS, &a->num_layers));
    TRY(get_int(c, "num_attention_heads", true, 0, 1, LIM_HEADS, &a->num_heads));
    TRY(get_int(c, "num_key_value_heads", false, a->num_heads, 1, LIM_HEADS, &a->num_kv_heads));
    TRY(get_int(c, "vocab_size", true, 0, 1, LIM_VOCAB, &a->vocab_size));
    TRY(get_int(c, "intermediate_size", true, 0, 1, LIM_DIM, &a->intermediate_size));
    TRY(get_bool(c, "tie_word_embeddings", false, &a->tie_embeddings));
    const char *dt = NULL;
    TRY(get_str(c, "torch_dtype", &dt));
    if (!dt) TRY(get_str(c, "dtype", &dt)); /* newer transformers */
    a->dtype = FERRY_DTYPE_BF16;           /* RL trainers and engines hold bf16 */
    if (dt && !ferry_dtype_parse(dt, &a->dtype))
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): torch_dtype \"%s\" is not a known dtype",
                          c->model_type, dt);
    if (opts && (opts->field_mask & FERRY_MODEL_OPT_DTYPE)) {
        if (ferry_dtype_size(opts->dtype) == 0)
            return ferry_fail(c->err, FERRY_ERR_INVALID_ARGUMENT, "model options: invalid dtype %d",
                              (int)opts->dtype);
        a->dtype = opts->dtype;
    }
    if (a->num_heads % a->num_kv_heads != 0)
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): num_attention_heads %lld is not a multiple "
                          "of num_key_value_heads %lld",
                          c->model_type, (long long)a->num_heads, (long long)a->num_kv_heads);
    a->moe_layer_freq = 1;
    a->sparse_step = 1;
    return FERRY_OK;
}

static ferry_status_t read_head_dim(cfg_t *c, ferry_arch_t *a) {
    if (json_object_get(c->root, "head_dim") && !json_is_null(json_object_get(c->root, "head_dim")))
        return get_int(c, "head_dim", true, 0, 1, LIM_DIM, &a->head_dim);
    if (a->hidden_size % a->num_heads != 0)
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): no head_dim, and hidden_size %lld is not a "
                          "multiple of num_attention_heads %lld",
                          c->model_type, (long long)a->hidden_size, (long long)a->num_heads);
    a->head_dim = a->hidden_size / a->num_heads;
    return FERRY_OK;
}

static ferry_status_t read_dense(cfg_t *c, ferry_arch_t *a) {
    a->family = FERRY_FAMILY_DENSE;
    TRY(read_head_dim(c, a));
    bool attention_bias = false;
    if (strcmp(c->model_type, "qwen2") == 0) {
        a->qkv_bias = true; /* Qwen2 always has q/k/v biases and none on o_proj */
    } else {
        TRY(get_bool(c, "attention_bias", false, &attention_bias));
        a->qkv_bias = a->o_bias = attention_bias;
    }
    if (strcmp(c->model_type, "llama") == 0) TRY(get_bool(c, "mlp_bias", false, &a->mlp_bias));
    a->qk_norm = strcmp(c->model_type, "qwen3") == 0;
    return FERRY_OK;
}

static ferry_status_t read_qwen3_moe(cfg_t *c, ferry_arch_t *a) {
    a->family = FERRY_FAMILY_QWEN3_MOE;
    TRY(read_head_dim(c, a));
    bool attention_bias = false;
    TRY(get_bool(c, "attention_bias", false, &attention_bias));
    a->qkv_bias = a->o_bias = attention_bias;
    a->qk_norm = true;
    TRY(get_int(c, "num_experts", true, 0, 0, LIM_EXPERTS, &a->num_experts));
    TRY(get_int(c, "num_experts_per_tok", a->num_experts > 0, 0, 0, LIM_EXPERTS,
                &a->experts_per_token));
    TRY(get_int(c, "moe_intermediate_size", a->num_experts > 0, 0, 0, LIM_DIM,
                &a->moe_intermediate_size));
    TRY(get_int(c, "decoder_sparse_step", false, 1, 1, FERRY_MAX_LAYERS, &a->sparse_step));
    json_t *only = json_object_get(c->root, "mlp_only_layers");
    if (only && !json_is_null(only)) {
        if (!json_is_array(only))
            return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                              "config.json (model_type qwen3_moe): \"mlp_only_layers\" must be a "
                              "list of layer indices");
        size_t i;
        json_t *v;
        json_array_foreach(only, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= a->num_layers)
                return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                                  "config.json (model_type qwen3_moe): \"mlp_only_layers\"[%zu] is "
                                  "not a layer index in [0, %lld)",
                                  i, (long long)a->num_layers);
            int64_t l = (int64_t)json_integer_value(v);
            a->dense_layers[l / 64] |= 1ull << (l % 64);
        }
    }
    return FERRY_OK;
}

static ferry_status_t read_deepseek(cfg_t *c, const ferry_model_options_t *opts, ferry_arch_t *a) {
    a->family = FERRY_FAMILY_DEEPSEEK;
    bool attention_bias = false;
    TRY(get_bool(c, "attention_bias", false, &attention_bias));
    if (attention_bias)
        return ferry_fail(c->err, FERRY_ERR_UNSUPPORTED,
                          "config.json (model_type %s): attention_bias = true is not supported",
                          c->model_type);
    TRY(get_int(c, "q_lora_rank", false, 0, 0, LIM_DIM, &a->q_lora_rank));
    TRY(get_int(c, "kv_lora_rank", true, 0, 1, LIM_DIM, &a->kv_lora_rank));
    TRY(get_int(c, "qk_nope_head_dim", true, 0, 0, LIM_DIM, &a->qk_nope_head_dim));
    TRY(get_int(c, "qk_rope_head_dim", true, 0, 1, LIM_DIM, &a->qk_rope_head_dim));
    TRY(get_int(c, "v_head_dim", true, 0, 1, LIM_DIM, &a->v_head_dim));
    TRY(get_int(c, "n_routed_experts", false, 0, 0, LIM_EXPERTS, &a->num_experts));
    TRY(get_int(c, "n_shared_experts", false, 0, 0, 64, &a->num_shared_experts));
    TRY(get_int(c, "num_experts_per_tok", a->num_experts > 0, 0, 0, LIM_EXPERTS,
                &a->experts_per_token));
    TRY(get_int(c, "moe_intermediate_size", a->num_experts > 0, 0, 0, LIM_DIM,
                &a->moe_intermediate_size));
    TRY(get_int(c, "first_k_dense_replace", false, 0, 0, FERRY_MAX_LAYERS, &a->first_k_dense));
    TRY(get_int(c, "moe_layer_freq", false, 1, 1, FERRY_MAX_LAYERS, &a->moe_layer_freq));
    const char *topk = NULL;
    TRY(get_str(c, "topk_method", &topk));
    a->expert_bias = topk && strcmp(topk, "noaux_tc") == 0;
    int64_t mtp = 0;
    TRY(get_int(c, "num_nextn_predict_layers", false, 0, 0, 16, &mtp));
    if (opts && (opts->field_mask & FERRY_MODEL_OPT_MTP) && opts->include_mtp) {
        if (a->num_layers + mtp > FERRY_MAX_LAYERS)
            return ferry_fail(c->err, FERRY_ERR_LIMIT, "config.json: more than %d layers with MTP",
                              FERRY_MAX_LAYERS);
        a->num_mtp_layers = mtp;
    }
    a->num_kv_heads = a->num_heads;
    a->head_dim = a->qk_nope_head_dim + a->qk_rope_head_dim;
    return FERRY_OK;
}

/* ---- quantization_config ------------------------------------------------ */

static ferry_status_t q_str(cfg_t *c, json_t *qc, const char *key, const char **out) {
    json_t *v = json_object_get(qc, key);
    *out = NULL;
    if (!v || json_is_null(v)) return FERRY_OK;
    if (!json_is_string(v))
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): quantization_config.%s must be a string", c->model_type,
                          key);
    *out = json_string_value(v);
    return FERRY_OK;
}

/* A string field that, when present, must be one of the values ferry
 * implements (want); refusals name the field and the value. */
static ferry_status_t q_only(cfg_t *c, json_t *qc, const char *key, const char *want, const char *what,
                             const char **out) {
    TRY(q_str(c, qc, key, out));
    if (*out && strcmp(*out, want) != 0)
        return ferry_fail(c->err, FERRY_ERR_UNSUPPORTED,
                          "config.json (model_type %s): quantization_config.%s = \"%.64s\" is not supported (%s)",
                          c->model_type, key, *out, what);
    return FERRY_OK;
}

/* Appends the module prefixes of list `key` (absent or null: none) to q. */
static ferry_status_t q_prefixes(ferry_ctx_t *ctx, cfg_t *c, json_t *qc, const char *key, model_qcfg_t *q,
                                 size_t *cap, size_t *len) {
    json_t *v = json_object_get(qc, key);
    if (!v || json_is_null(v)) return FERRY_OK;
    if (!json_is_array(v))
        return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                          "config.json (model_type %s): quantization_config.%s must be a list of module names",
                          c->model_type, key);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || json_string_length(e) == 0 ||
            strlen(json_string_value(e)) != json_string_length(e))
            return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                              "config.json (model_type %s): quantization_config.%s[%zu] is not a module name",
                              c->model_type, key, i);
        size_t n = json_string_length(e) + 1;
        if (ferry_grow(ctx, (void **)&q->ignore, 1, cap, *len + n))
            return ferry_fail(c->err, FERRY_ERR_NO_MEMORY, "out of memory reading quantization_config.%s", key);
        memcpy(q->ignore + *len, json_string_value(e), n);
        *len += n;
        q->nignore++;
    }
    return FERRY_OK;
}

/* quantization_config under opts->quant: NONE never looks at it; AUTO
 * quantizes when it says fp8; FP8 always (with its fields when present). */
static ferry_status_t read_quant(ferry_ctx_t *ctx, cfg_t *c, const ferry_model_options_t *opts,
                                 const ferry_arch_t *a, model_qcfg_t *q) {
    ferry_model_quant_t mode = FERRY_MODEL_QUANT_NONE;
    uint32_t flags = 0;
    if (opts && (opts->field_mask & FERRY_MODEL_OPT_QUANT)) {
        mode = opts->quant;
        flags = opts->quant_flags;
        if (mode != FERRY_MODEL_QUANT_NONE && mode != FERRY_MODEL_QUANT_AUTO && mode != FERRY_MODEL_QUANT_FP8)
            return ferry_fail(c->err, FERRY_ERR_INVALID_ARGUMENT, "model options: invalid quant %d", (int)mode);
        if (flags & ~(uint32_t)FERRY_FP8_UE8M0)
            return ferry_fail(c->err, FERRY_ERR_INVALID_ARGUMENT, "model options: unknown quant_flags 0x%x", flags);
    }
    if (mode == FERRY_MODEL_QUANT_NONE) return FERRY_OK;
    json_t *qc = json_object_get(c->root, "quantization_config");
    if (qc && json_is_null(qc)) qc = NULL;
    if (!qc && mode == FERRY_MODEL_QUANT_AUTO) return FERRY_OK;
    if (qc) {
        if (!json_is_object(qc))
            return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                              "config.json (model_type %s): quantization_config must be an object", c->model_type);
        const char *s;
        TRY(q_str(c, qc, "quant_method", &s));
        if (!s)
            return ferry_fail(c->err, FERRY_ERR_INVALID_CONFIG,
                              "config.json (model_type %s): quantization_config has no quant_method", c->model_type);
        TRY(q_only(c, qc, "quant_method", "fp8", "ferry quantizes to fp8 only", &s));
        TRY(q_only(c, qc, "fmt", "e4m3", "float8_e4m3fn only", &s));
        TRY(q_only(c, qc, "activation_scheme", "dynamic", "dynamic activation scales only", &s));
        TRY(q_only(c, qc, "scale_fmt", "ue8m0", "ue8m0 or none", &s));
        if (s) flags |= FERRY_FP8_UE8M0;
        json_t *bs = json_object_get(qc, "weight_block_size");
        if (!bs || json_is_null(bs))
            return ferry_fail(c->err, FERRY_ERR_UNSUPPORTED,
                              "config.json (model_type %s): quantization_config has no weight_block_size: per-tensor "
                              "fp8 is not supported ([128, 128] blocks only)",
                              c->model_type);
        bool ok = json_is_array(bs) && json_array_size(bs) == 2;
        for (size_t i = 0; ok && i < 2; i++) {
            json_t *d = json_array_get(bs, i);
            ok = json_is_integer(d) && json_integer_value(d) == FERRY_FP8_BLOCK;
        }
        if (!ok) {
            char *txt = json_dumps(bs, JSON_COMPACT | JSON_ENCODE_ANY);
            ferry_status_t st = ferry_fail(
                c->err, FERRY_ERR_UNSUPPORTED,
                "config.json (model_type %s): quantization_config.weight_block_size = %.64s is not supported "
                "([128, 128] only)",
                c->model_type, txt ? txt : "?");
            free(txt);
            return st;
        }
    }
    if (a->family != FERRY_FAMILY_DEEPSEEK)
        return ferry_fail(c->err, FERRY_ERR_UNSUPPORTED,
                          "config.json (model_type %s): fp8 engine specs are generated for deepseek_v3 and kimi_k2 "
                          "only",
                          c->model_type);
    model_qcfg_t r = {.fp8 = true, .flags = flags};
    size_t cap = 0, len = 0;
    ferry_status_t st = FERRY_OK;
    if (qc && (st = q_prefixes(ctx, c, qc, "ignored_layers", &r, &cap, &len)) == FERRY_OK)
        st = q_prefixes(ctx, c, qc, "modules_to_not_convert", &r, &cap, &len);
    if (st != FERRY_OK) {
        model_qcfg_free(ctx, &r);
        return st;
    }
    *q = r;
    return FERRY_OK;
}

void model_qcfg_free(ferry_ctx_t *ctx, model_qcfg_t *q) {
    if (!q) return;
    ferry_free(ctx, q->ignore);
    memset(q, 0, sizeof *q);
}

bool model_prefix_covers(const char *prefix, const char *name) {
    size_t n = strlen(prefix);
    if (n == 0 || strncmp(prefix, name, n) != 0) return false;
    return name[n] == '\0' || name[n] == '.' || prefix[n - 1] == '.';
}

bool ferry_arch_layer_is_moe(const ferry_arch_t *a, int64_t l) {
    if (a->num_experts <= 0 || l < a->first_k_dense || l < 0) return false;
    if (a->moe_layer_freq > 0 && l % a->moe_layer_freq != 0) return false;
    if (a->sparse_step > 0 && (l + 1) % a->sparse_step != 0) return false;
    if (l < FERRY_MAX_LAYERS && (a->dense_layers[l / 64] >> (l % 64)) & 1) return false;
    return true;
}

ferry_status_t ferry_arch_from_hf_config(ferry_ctx_t *ctx, const char *json, size_t len,
                                         const ferry_model_options_t *opts, ferry_arch_t *out,
                                         model_qcfg_t *q, ferry_errbuf_t *err) {
    /* JSON text never holds a raw NUL; refuse it rather than let the parser
     * see a shorter document than the caller passed */
    const char *nul = memchr(json, '\0', len);
    if (nul)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "config.json: NUL byte at offset %zu",
                          (size_t)(nul - json));
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "config.json: %s at line %d column %d",
                          jerr.text, jerr.line, jerr.column);
    ferry_status_t st = FERRY_OK;
    ferry_arch_t a;
    memset(&a, 0, sizeof a);
    cfg_t c = {root, "?", err};
    const char *mt = NULL;
    if (!json_is_object(root)) {
        st = ferry_fail(err, FERRY_ERR_INVALID_CONFIG, "config.json: top level is not an object");
        goto done;
    }
    if ((st = get_str(&c, "model_type", &mt)) != FERRY_OK) goto done;
    if (!mt) {
        st = ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                        "config.json: required field \"model_type\" is missing");
        goto done;
    }
    if (strlen(mt) >= sizeof a.model_type) {
        st = ferry_fail(err, FERRY_ERR_UNSUPPORTED, "config.json: model_type \"%.40s...\" is too long",
                        mt);
        goto done;
    }
    c.model_type = mt;
    snprintf(a.model_type, sizeof a.model_type, "%s", mt);
    if ((st = read_common(&c, opts, &a)) != FERRY_OK) goto done;
    if (!strcmp(mt, "llama") || !strcmp(mt, "qwen2") || !strcmp(mt, "qwen3"))
        st = read_dense(&c, &a);
    else if (!strcmp(mt, "qwen3_moe"))
        st = read_qwen3_moe(&c, &a);
    else if (!strcmp(mt, "deepseek_v3") || !strcmp(mt, "kimi_k2"))
        st = read_deepseek(&c, opts, &a);
    else
        st = ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                        "config.json: model_type \"%s\" is not supported (llama, qwen2, qwen3, "
                        "qwen3_moe, deepseek_v3, kimi_k2)",
                        mt);
    if (st != FERRY_OK) goto done;
    if (a.num_experts > 0 && a.experts_per_token > a.num_experts) {
        st = ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                        "config.json (model_type %s): num_experts_per_tok %lld exceeds the %lld "
                        "experts",
                        mt, (long long)a.experts_per_token, (long long)a.num_experts);
        goto done;
    }
    if (a.num_experts > 0 && a.moe_intermediate_size <= 0) {
        st = ferry_fail(err, FERRY_ERR_INVALID_CONFIG,
                        "config.json (model_type %s): moe_intermediate_size must be positive", mt);
        goto done;
    }
    model_qcfg_t qc;
    memset(&qc, 0, sizeof qc);
    if ((st = read_quant(ctx, &c, opts, &a, &qc)) != FERRY_OK) goto done;
    *out = a;
    if (q)
        *q = qc;
    else
        model_qcfg_free(ctx, &qc);
done:
    json_decref(root);
    return st;
}
