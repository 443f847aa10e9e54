/* Architecture -> the Hugging Face checkpoint's tensor list (names and shapes
 * exactly as in the published safetensors), and the config.json entry points. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout/model_internal.h"

typedef struct {
    ferry_model_t *m;
    ferry_status_t st;
    bool fp8;          /* record the linears to declare fp8 */
    uint32_t *lin;     /* their indices, in order */
    size_t nlin, cap_lin;
} gen_t;

static void add(gen_t *g, ferry_dtype_t dt, int64_t d0, int64_t d1, const char *fmt, ...)
    FERRY_PRINTF(5, 6);

/* Adds a 1-d (d1 == 0) or 2-d tensor named by fmt, ap; the first failure
 * sticks. Whether it was added. */
static bool addv(gen_t *g, ferry_dtype_t dt, int64_t d0, int64_t d1, const char *fmt, va_list ap) {
    if (g->st != FERRY_OK) return false;
    char name[256];
    vsnprintf(name, sizeof name, fmt, ap);
    int64_t shape[2] = {d0, d1};
    g->st = ferry_model_add_tensor(g->m, name, dt, d1 ? 2 : 1, shape, NULL);
    return g->st == FERRY_OK;
}

static void add(gen_t *g, ferry_dtype_t dt, int64_t d0, int64_t d1, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    addv(g, dt, d0, d1, fmt, ap);
    va_end(ap);
}

/* Adds the weight of a linear layer an fp8 engine quantizes (vLLM's
 * LinearBase and FusedMoE under Fp8Config: attention projections, dense,
 * shared and routed expert MLPs); everything else goes through add(). */
static void add_linear(gen_t *g, ferry_dtype_t dt, int64_t d0, int64_t d1, const char *fmt, ...)
    FERRY_PRINTF(5, 6);

static void add_linear(gen_t *g, ferry_dtype_t dt, int64_t d0, int64_t d1, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bool added = addv(g, dt, d0, d1, fmt, ap);
    va_end(ap);
    if (!added || !g->fp8) return;
    if (ferry_grow(g->m->ctx, (void **)&g->lin, sizeof *g->lin, &g->cap_lin, g->nlin + 1)) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(g->m, (uint32_t)g->m->ntensors - 1, &ti);
        g->st = ferry_fail(&g->m->err, FERRY_ERR_NO_MEMORY, "out of memory generating %s", ti.name);
        return;
    }
    g->lin[g->nlin++] = (uint32_t)g->m->ntensors - 1;
}

static void gen_mlp(gen_t *g, const char *prefix, int64_t inter, bool bias) {
    const ferry_arch_t *a = &g->m->arch;
    ferry_dtype_t dt = a->dtype;
    int64_t h = a->hidden_size;
    add_linear(g, dt, inter, h, "%s.gate_proj.weight", prefix);
    add_linear(g, dt, inter, h, "%s.up_proj.weight", prefix);
    add_linear(g, dt, h, inter, "%s.down_proj.weight", prefix);
    if (bias) {
        add(g, dt, inter, 0, "%s.gate_proj.bias", prefix);
        add(g, dt, inter, 0, "%s.up_proj.bias", prefix);
        add(g, dt, h, 0, "%s.down_proj.bias", prefix);
    }
}

static void gen_gqa_attention(gen_t *g, const char *p) {
    const ferry_arch_t *a = &g->m->arch;
    ferry_dtype_t dt = a->dtype;
    int64_t h = a->hidden_size, q = a->num_heads * a->head_dim, kv = a->num_kv_heads * a->head_dim;
    add(g, dt, q, h, "%s.self_attn.q_proj.weight", p);
    add(g, dt, kv, h, "%s.self_attn.k_proj.weight", p);
    add(g, dt, kv, h, "%s.self_attn.v_proj.weight", p);
    add(g, dt, h, q, "%s.self_attn.o_proj.weight", p);
    if (a->qkv_bias) {
        add(g, dt, q, 0, "%s.self_attn.q_proj.bias", p);
        add(g, dt, kv, 0, "%s.self_attn.k_proj.bias", p);
        add(g, dt, kv, 0, "%s.self_attn.v_proj.bias", p);
    }
    if (a->o_bias) add(g, dt, h, 0, "%s.self_attn.o_proj.bias", p);
    if (a->qk_norm) {
        add(g, dt, a->head_dim, 0, "%s.self_attn.q_norm.weight", p);
        add(g, dt, a->head_dim, 0, "%s.self_attn.k_norm.weight", p);
    }
}

static void gen_mla_attention(gen_t *g, const char *p) {
    const ferry_arch_t *a = &g->m->arch;
    ferry_dtype_t dt = a->dtype;
    int64_t h = a->hidden_size, nh = a->num_heads;
    int64_t qk = a->qk_nope_head_dim + a->qk_rope_head_dim;
    if (a->q_lora_rank) {
        add_linear(g, dt, a->q_lora_rank, h, "%s.self_attn.q_a_proj.weight", p);
        add(g, dt, a->q_lora_rank, 0, "%s.self_attn.q_a_layernorm.weight", p);
        add_linear(g, dt, nh * qk, a->q_lora_rank, "%s.self_attn.q_b_proj.weight", p);
    } else {
        add_linear(g, dt, nh * qk, h, "%s.self_attn.q_proj.weight", p);
    }
    add_linear(g, dt, a->kv_lora_rank + a->qk_rope_head_dim, h, "%s.self_attn.kv_a_proj_with_mqa.weight",
               p);
    add(g, dt, a->kv_lora_rank, 0, "%s.self_attn.kv_a_layernorm.weight", p);
    add_linear(g, dt, nh * (a->qk_nope_head_dim + a->v_head_dim), a->kv_lora_rank,
               "%s.self_attn.kv_b_proj.weight", p);
    add_linear(g, dt, h, nh * a->v_head_dim, "%s.self_attn.o_proj.weight", p);
}

static void gen_moe(gen_t *g, const char *p) {
    const ferry_arch_t *a = &g->m->arch;
    ferry_dtype_t dt = a->dtype;
    add(g, dt, a->num_experts, a->hidden_size, "%s.mlp.gate.weight", p);
    /* The published DeepSeek-V3/Kimi-K2 checkpoints store this bias in F32. */
    if (a->expert_bias) add(g, FERRY_DTYPE_F32, a->num_experts, 0, "%s.mlp.gate.e_score_correction_bias", p);
    char ep[320];
    for (int64_t e = 0; e < a->num_experts && g->st == FERRY_OK; e++) {
        snprintf(ep, sizeof ep, "%s.mlp.experts.%lld", p, (long long)e);
        gen_mlp(g, ep, a->moe_intermediate_size, false);
    }
    if (a->num_shared_experts) {
        snprintf(ep, sizeof ep, "%s.mlp.shared_experts", p);
        gen_mlp(g, ep, a->moe_intermediate_size * a->num_shared_experts, false);
    }
}

static void gen_layer(gen_t *g, int64_t l) {
    const ferry_arch_t *a = &g->m->arch;
    char p[64];
    snprintf(p, sizeof p, "model.layers.%lld", (long long)l);
    add(g, a->dtype, a->hidden_size, 0, "%s.input_layernorm.weight", p);
    if (a->family == FERRY_FAMILY_DEEPSEEK)
        gen_mla_attention(g, p);
    else
        gen_gqa_attention(g, p);
    add(g, a->dtype, a->hidden_size, 0, "%s.post_attention_layernorm.weight", p);
    /* MTP layers (l >= num_layers) are MoE layers in DeepSeek-V3. */
    if (ferry_arch_layer_is_moe(a, l)) {
        gen_moe(g, p);
    } else {
        char mp[80];
        snprintf(mp, sizeof mp, "%s.mlp", p);
        gen_mlp(g, mp, a->intermediate_size, a->mlp_bias);
    }
}

/* DeepSeek multi-token-prediction layer extras (model.layers.{num_layers + i}). */
static void gen_mtp_extras(gen_t *g, int64_t l) {
    const ferry_arch_t *a = &g->m->arch;
    int64_t h = a->hidden_size;
    add(g, a->dtype, a->vocab_size, h, "model.layers.%lld.embed_tokens.weight", (long long)l);
    add(g, a->dtype, h, 0, "model.layers.%lld.enorm.weight", (long long)l);
    add(g, a->dtype, h, 0, "model.layers.%lld.hnorm.weight", (long long)l);
    add(g, a->dtype, h, 2 * h, "model.layers.%lld.eh_proj.weight", (long long)l);
    add(g, a->dtype, h, 0, "model.layers.%lld.shared_head.norm.weight", (long long)l);
    add(g, a->dtype, a->vocab_size, h, "model.layers.%lld.shared_head.head.weight", (long long)l);
}

/* Declares the recorded linears fp8 (their scales appended in order),
 * except those under an ignored module prefix. */
static void mark_fp8(gen_t *g, const model_qcfg_t *q) {
    for (size_t i = 0; i < g->nlin && g->st == FERRY_OK; i++) {
        const char *name = model_tensor_name(g->m, g->lin[i]);
        bool skip = false;
        const char *pre = q->ignore;
        for (size_t k = 0; k < q->nignore && !skip; k++, pre += strlen(pre) + 1)
            skip = model_prefix_covers(pre, name);
        if (!skip) g->st = ferry_model_add_fp8(g->m, g->lin[i], q->flags, NULL);
    }
}

ferry_status_t ferry_model_generate(ferry_model_t *m, const model_qcfg_t *q) {
    gen_t g = {.m = m, .st = FERRY_OK, .fp8 = q && q->fp8};
    const ferry_arch_t *a = &m->arch;
    add(&g, a->dtype, a->vocab_size, a->hidden_size, "model.embed_tokens.weight");
    for (int64_t l = 0; l < a->num_layers + a->num_mtp_layers && g.st == FERRY_OK; l++) {
        gen_layer(&g, l);
        if (l >= a->num_layers) gen_mtp_extras(&g, l);
    }
    add(&g, a->dtype, a->hidden_size, 0, "model.norm.weight");
    if (!a->tie_embeddings) add(&g, a->dtype, a->vocab_size, a->hidden_size, "lm_head.weight");
    if (g.fp8) mark_fp8(&g, q);
    ferry_free(m->ctx, g.lin);
    return g.st;
}

ferry_status_t ferry_model_from_hf_config(ferry_ctx_t *ctx, const char *name, const char *json,
                                          size_t json_len, const ferry_model_options_t *opts,
                                          ferry_model_t **out) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    if (!name || !json || !out)
        return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_INVALID_ARGUMENT,
                          "ferry_model_from_hf_config: name, json and out must not be NULL");
    ferry_arch_t arch;
    model_qcfg_t q;
    ferry_status_t st =
        ferry_arch_from_hf_config(ctx, json, json_len, opts, &arch, &q, ferry_ctx_errbuf(ctx));
    if (st != FERRY_OK) return st;
    ferry_model_t *m;
    if ((st = ferry_model_create_arch(ctx, name, &arch, &m)) != FERRY_OK) {
        model_qcfg_free(ctx, &q);
        return st;
    }
    st = ferry_model_generate(m, &q);
    model_qcfg_free(ctx, &q);
    if (st != FERRY_OK) {
        ferry_fail(ferry_ctx_errbuf(ctx), st, "model %s: %s", name, m->err.text);
        ferry_model_destroy(m);
        return st;
    }
    ferry_log(ctx, FERRY_LOG_DEBUG, "model %s: %s, %u tensors (%u fp8), %llu parameters", name,
              arch.model_type, ferry_model_tensor_count(m), m->nquant,
              (unsigned long long)ferry_model_param_count(m));
    *out = m;
    return FERRY_OK;
}

#define CONFIG_MAX_BYTES (16u << 20)

ferry_status_t ferry_model_from_hf_config_file(ferry_ctx_t *ctx, const char *path,
                                               const ferry_model_options_t *opts,
                                               ferry_model_t **out) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if (!path || !out)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                          "ferry_model_from_hf_config_file: path and out must not be NULL");
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; anything but a
     * regular file is refused before a read could block or never end */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return ferry_fail(err, errno == ENOENT ? FERRY_ERR_NOT_FOUND : FERRY_ERR_IO, "%s: %s", path,
                          strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ferry_fail(err, FERRY_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s is %s, not a regular config.json file", path,
                          S_ISDIR(sb.st_mode)    ? "a directory"
                          : S_ISFIFO(sb.st_mode) ? "a FIFO"
                          : S_ISCHR(sb.st_mode)  ? "a character device"
                          : S_ISBLK(sb.st_mode)  ? "a block device"
                          : S_ISSOCK(sb.st_mode) ? "a socket"
                                                 : "no regular file");
    }
    char *buf = ferry_alloc(ctx, CONFIG_MAX_BYTES + 1);
    if (!buf) {
        close(fd);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory reading %s", path);
    }
    size_t n = 0;
    int read_error = 0;
    while (n < CONFIG_MAX_BYTES + 1) {
        ssize_t r = read(fd, buf + n, CONFIG_MAX_BYTES + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) read_error = errno;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    ferry_status_t st;
    if (read_error) {
        st = ferry_fail(err, FERRY_ERR_IO, "%s: %s", path, strerror(read_error));
    } else if (n > CONFIG_MAX_BYTES) {
        st = ferry_fail(err, FERRY_ERR_LIMIT, "%s: larger than %u bytes; not a config.json", path,
                        CONFIG_MAX_BYTES);
    } else {
        /* name: base name without ".json" */
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        char name[128];
        snprintf(name, sizeof name, "%s", base);
        size_t len = strlen(name);
        if (len > 5 && strcmp(name + len - 5, ".json") == 0) name[len - 5] = '\0';
        st = ferry_model_from_hf_config(ctx, name, buf, n, opts, out);
        if (st != FERRY_OK) {
            char tmp[FERRY_ERR_TEXT];
            snprintf(tmp, sizeof tmp, "%s", err->text);
            ferry_fail(err, st, "%s: %s", path, tmp);
        }
    }
    ferry_free(ctx, buf);
    return st;
}
