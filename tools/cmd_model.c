#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

enum { CAT_EMBED, CAT_ATTN, CAT_MLP, CAT_EXPERTS, CAT_SHARED, CAT_ROUTER, CAT_NORM, CAT_MTP, CAT_SCALE, CAT_N };
static const char *cat_names[CAT_N] = {"embedding/lm_head", "attention", "dense mlp",
                                       "routed experts", "shared experts", "router",
                                       "norms", "mtp extras", "fp8 scales"};

static int category(const ferry_model_t *m, uint32_t i, const char *name) {
    ferry_tensor_quant_t q;
    if (ferry_model_tensor_quant(m, i, &q) && q.kind == FERRY_QUANT_FP8_SCALE) return CAT_SCALE;
    if (strstr(name, "embed_tokens") || strstr(name, "lm_head") || strstr(name, "shared_head.head"))
        return CAT_EMBED;
    if (strstr(name, "enorm") || strstr(name, "hnorm") || strstr(name, "eh_proj")) return CAT_MTP;
    if (strstr(name, "norm")) return CAT_NORM;
    if (strstr(name, "self_attn")) return CAT_ATTN;
    if (strstr(name, ".mlp.experts.")) return CAT_EXPERTS;
    if (strstr(name, ".mlp.shared_experts.")) return CAT_SHARED;
    if (strstr(name, ".mlp.gate.")) return CAT_ROUTER;
    return CAT_MLP;
}

static uint64_t numel(const ferry_tensor_info_t *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ferry model --model M [--mtp] [--quant none|auto|fp8] [--tensors] [--json]\n"
               "  M: a config.json path or a bundled name (qwen3-0.6b, qwen3-8b, qwen3-30b-a3b,\n"
               "     deepseek-v3, kimi-k2)\n"
               "  --mtp      include DeepSeek multi-token-prediction layers\n"
               "  --quant    none (default: a trainer's spec, quantization_config ignored), auto (an fp8\n"
               "             engine's spec where quantization_config says fp8), fp8 (fp8 regardless)\n"
               "  --tensors  list every tensor with dtype and shape\n"
               "  --json     machine-readable output\n");
}

int cmd_model(int argc, char **argv) {
    const char *model_arg = NULL;
    bool tensors = false, json = false, mtp = false;
    ferry_model_quant_t quant = FERRY_MODEL_QUANT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_opt(argc, argv, &i, "--model", &v)) {
            if (!v) return CLI_USAGE;
            model_arg = v;
        } else if (!strcmp(argv[i], "--tensors")) {
            tensors = true;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--mtp")) {
            mtp = true;
        } else if (cli_opt(argc, argv, &i, "--quant", &v)) {
            if (!v || !cli_quant(v, &quant)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_OK;
        } else {
            fprintf(stderr, "ferry model: unknown option %s\n", argv[i]);
            usage(stderr);
            return CLI_USAGE;
        }
    }
    if (!model_arg) {
        usage(stderr);
        return CLI_USAGE;
    }
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_USAGE;
    ferry_model_t *m = cli_load_model_quant(ctx, model_arg, mtp, quant);
    if (!m) {
        ferry_ctx_destroy(ctx);
        return CLI_USAGE;
    }
    const ferry_arch_t *a = ferry_model_arch(m);
    uint64_t per_cat[CAT_N] = {0};
    uint32_t n = ferry_model_tensor_count(m);
    /* fp8 weights and their scales */
    uint64_t fp8_elems = 0, fp8_bytes = 0, scales = 0, scale_bytes = 0;
    uint32_t nscale = 0;
    bool ue8m0 = false;
    for (uint32_t i = 0; i < n; i++) {
        ferry_tensor_info_t t;
        ferry_tensor_quant_t q;
        ferry_model_tensor(m, i, &t);
        ferry_model_tensor_quant(m, i, &q);
        per_cat[category(m, i, t.name)] += numel(&t);
        if (q.kind == FERRY_QUANT_FP8_BLOCK) {
            fp8_elems += numel(&t);
            fp8_bytes += numel(&t) * ferry_dtype_size(t.dtype);
            ue8m0 = ue8m0 || (q.flags & FERRY_FP8_UE8M0);
        } else if (q.kind == FERRY_QUANT_FP8_SCALE) {
            nscale++;
            scales += numel(&t);
            scale_bytes += numel(&t) * ferry_dtype_size(t.dtype);
        }
    }
    uint32_t nfp8 = ferry_model_quant_count(m);
    uint64_t total = ferry_model_param_count(m);
    uint64_t active = total;
    if (a->num_experts > 0)
        active = total - per_cat[CAT_EXPERTS] +
                 per_cat[CAT_EXPERTS] / (uint64_t)a->num_experts * (uint64_t)a->experts_per_token;
    char b1[32], b2[32], b3[32];
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(ferry_model_name(m)));
        json_object_set_new(o, "model_type", json_string(a->model_type));
        json_object_set_new(o, "dtype", json_string(ferry_dtype_name(a->dtype)));
        json_object_set_new(o, "tensors", json_integer(n));
        json_object_set_new(o, "parameters", json_integer((json_int_t)total));
        json_object_set_new(o, "activated_parameters", json_integer((json_int_t)active));
        json_object_set_new(o, "bytes", json_integer((json_int_t)ferry_model_byte_size(m)));
        json_t *cats = json_object();
        for (int c = 0; c < CAT_N; c++)
            if (per_cat[c]) json_object_set_new(cats, cat_names[c], json_integer((json_int_t)per_cat[c]));
        json_object_set_new(o, "by_kind", cats);
        json_t *qo = json_object();
        json_object_set_new(qo, "fp8_tensors", json_integer(nfp8));
        json_object_set_new(qo, "fp8_elements", json_integer((json_int_t)fp8_elems));
        json_object_set_new(qo, "fp8_bytes", json_integer((json_int_t)fp8_bytes));
        json_object_set_new(qo, "scale_tensors", json_integer(nscale));
        json_object_set_new(qo, "scales", json_integer((json_int_t)scales));
        json_object_set_new(qo, "scale_bytes", json_integer((json_int_t)scale_bytes));
        json_object_set_new(qo, "block", json_pack("[i, i]", (int)FERRY_FP8_BLOCK, (int)FERRY_FP8_BLOCK));
        json_object_set_new(qo, "ue8m0", json_boolean(ue8m0));
        json_object_set_new(o, "fp8", qo);
        if (tensors) {
            json_t *arr = json_array();
            for (uint32_t i = 0; i < n; i++) {
                ferry_tensor_info_t t;
                ferry_model_tensor(m, i, &t);
                json_t *shape = json_array();
                for (uint32_t d = 0; d < t.ndim; d++) json_array_append_new(shape, json_integer(t.shape[d]));
                json_t *e = json_pack("{s:s, s:s, s:o}", "name", t.name, "dtype", ferry_dtype_name(t.dtype),
                                      "shape", shape);
                ferry_tensor_quant_t q;
                ferry_model_tensor_quant(m, i, &q);
                ferry_tensor_info_t pt;
                if (q.kind != FERRY_QUANT_NONE && ferry_model_tensor(m, q.partner, &pt)) {
                    json_object_set_new(e, q.kind == FERRY_QUANT_FP8_BLOCK ? "scale" : "scales_of",
                                        json_string(pt.name));
                }
                json_array_append_new(arr, e);
            }
            json_object_set_new(o, "tensor_list", arr);
        }
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
    } else {
        printf("model        %s (model_type %s, weights %s)\n", ferry_model_name(m), a->model_type,
               ferry_dtype_name(a->dtype));
        printf("shape        hidden %lld, %lld layers%s, %lld heads (%lld KV), vocab %lld%s\n",
               (long long)a->hidden_size, (long long)a->num_layers,
               a->num_mtp_layers ? " + MTP" : "", (long long)a->num_heads,
               (long long)a->num_kv_heads, (long long)a->vocab_size,
               a->tie_embeddings ? ", tied embeddings" : "");
        if (a->num_experts)
            printf("experts      %lld routed (top %lld, intermediate %lld) + %lld shared; "
                   "dense layers: %lld first\n",
                   (long long)a->num_experts, (long long)a->experts_per_token,
                   (long long)a->moe_intermediate_size, (long long)a->num_shared_experts,
                   (long long)a->first_k_dense);
        if (a->family == FERRY_FAMILY_DEEPSEEK)
            printf("attention    MLA: q_lora %lld, kv_lora %lld, qk %lld+%lld, v %lld\n",
                   (long long)a->q_lora_rank, (long long)a->kv_lora_rank,
                   (long long)a->qk_nope_head_dim, (long long)a->qk_rope_head_dim,
                   (long long)a->v_head_dim);
        printf("parameters   %s (%llu) in %u tensors, %s\n", cli_count(total, b1, sizeof b1),
               (unsigned long long)total, n, cli_bytes(ferry_model_byte_size(m), b2, sizeof b2));
        if (a->num_experts) printf("activated    %s per token\n", cli_count(active, b3, sizeof b3));
        if (nfp8)
            printf("fp8          %u tensors, %s elements: %s as float8_e4m3fn, 128x128 blocks%s\n", nfp8,
                   cli_count(fp8_elems, b1, sizeof b1), cli_bytes(fp8_bytes, b2, sizeof b2),
                   ue8m0 ? ", UE8M0 scales" : "");
        if (nscale)
            printf("scales       %u weight_scale_inv tensors, %s floats (%llu): %s\n", nscale,
                   cli_count(scales, b1, sizeof b1), (unsigned long long)scales,
                   cli_bytes(scale_bytes, b2, sizeof b2));
        for (int c = 0; c < CAT_N; c++)
            if (per_cat[c])
                printf("  %-18s %12s  %5.1f%%\n", cat_names[c], cli_count(per_cat[c], b1, sizeof b1),
                       100.0 * (double)per_cat[c] / (double)total);
        if (tensors) {
            for (uint32_t i = 0; i < n; i++) {
                ferry_tensor_info_t t;
                ferry_model_tensor(m, i, &t);
                printf("%-64s %-5s [", t.name, ferry_dtype_name(t.dtype));
                for (uint32_t d = 0; d < t.ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t.shape[d]);
                printf("]\n");
            }
        }
    }
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);
    return CLI_OK;
}
