/* Bad config.json inputs: each must fail with the expected status, a detail
 * (ferry_ctx_error) that names the problem, and *out left NULL. Also every
 * truncation of the bundled configs must fail cleanly (and never crash or
 * read past the given length: each prefix sits in a buffer of exactly its
 * size, so ASan catches an over-read). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
    const char *what;
    const char *json;
    size_t len;
    ferry_status_t want;
    const char *needle; /* substring the detail must contain */
} bad_case_t;

/* A string literal and its length, NUL bytes inside included. */
#define J(s) s, sizeof(s) - 1

#define LLAMA_REST                                                                  \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, " \
    "\"intermediate_size\": 128, \"vocab_size\": 1000"
#define LLAMA "{\"model_type\": \"llama\", \"hidden_size\": 64, " LLAMA_REST

#define QMOE                                                                          \
    "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 4, "   \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "        \
    "\"intermediate_size\": 128, \"vocab_size\": 1000, \"moe_intermediate_size\": 32, " \
    "\"num_experts\": 4"

#define DS_BASE                                                                         \
    "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, \"num_hidden_layers\": 2, "  \
    "\"num_attention_heads\": 4, \"intermediate_size\": 512, \"vocab_size\": 1024, "      \
    "\"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 16, \"v_head_dim\": 24, "            \
    "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 96"
#define DS DS_BASE ", \"kv_lora_rank\": 64"

static const bad_case_t cases[] = {
    /* ---- JSON syntax ---- */
    {"invalid JSON (unterminated object)", J("{\"model_type\": \"llama\",\n  \"hidden_size\": 64,"),
     FERRY_ERR_INVALID_CONFIG, "line"},
    {"invalid JSON (bare word)", J("{\"model_type\": llama}"), FERRY_ERR_INVALID_CONFIG, "line"},
    {"invalid JSON (trailing comma)", J(LLAMA ",}"), FERRY_ERR_INVALID_CONFIG, "line"},
    {"invalid JSON (trailing garbage)", J(LLAMA "} x"), FERRY_ERR_INVALID_CONFIG, "line"},
    {"invalid JSON (two objects)", J(LLAMA "}" LLAMA "}"), FERRY_ERR_INVALID_CONFIG, "line"},
    {"invalid JSON (single quotes)", J("{'model_type': 'llama'}"), FERRY_ERR_INVALID_CONFIG, "line"},
    {"invalid JSON (NaN)", J("{\"model_type\": \"llama\", \"hidden_size\": NaN}"),
     FERRY_ERR_INVALID_CONFIG, "line"},
    {"invalid UTF-8", J("{\"model_type\": \"ll\xff" "ama\"}"), FERRY_ERR_INVALID_CONFIG, "line"},
    {"empty input", J(""), FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"whitespace only", J(" \n\t "), FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"duplicate key", J(LLAMA ", \"hidden_size\": 64}"), FERRY_ERR_INVALID_CONFIG, "duplicate"},
    {"duplicate model_type", J("{\"model_type\": \"llama\", \"model_type\": \"qwen3\"}"),
     FERRY_ERR_INVALID_CONFIG, "duplicate"},
    {"NUL byte between tokens", J("{\"model_type\": \"llama\",\0 \"hidden_size\": 64}"),
     FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"NUL byte inside a string", J("{\"model_type\": \"ll\0ama\", \"hidden_size\": 64}"),
     FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"NUL byte after the object", J(LLAMA "}\0"), FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"NUL byte after the object, then more", J(LLAMA "}\0{}"), FERRY_ERR_INVALID_CONFIG,
     "config.json"},
    {"escaped NUL in model_type", J("{\"model_type\": \"llama\\u0000x\", \"hidden_size\": 64, "
                                    LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"NUL byte at the start", J("\0" LLAMA "}"), FERRY_ERR_INVALID_CONFIG, "config.json"},

    /* ---- top level / model_type ---- */
    {"top level is an array", J("[" LLAMA "}]"), FERRY_ERR_INVALID_CONFIG, "top level"},
    {"top level is a string", J("\"llama\""), FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"top level is a number", J("42"), FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"top level is null", J("null"), FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"empty object", J("{}"), FERRY_ERR_INVALID_CONFIG, "model_type"},
    {"missing model_type", J("{\"hidden_size\": 64, " LLAMA_REST "}"), FERRY_ERR_INVALID_CONFIG,
     "model_type"},
    {"model_type null", J("{\"model_type\": null, \"hidden_size\": 64, " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "model_type"},
    {"model_type a number", J("{\"model_type\": 7, \"hidden_size\": 64, " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "model_type"},
    {"unsupported model_type gpt2", J("{\"model_type\": \"gpt2\", \"hidden_size\": 64, " LLAMA_REST "}"),
     FERRY_ERR_UNSUPPORTED, "gpt2"},
    {"unsupported model_type, case differs", J("{\"model_type\": \"Llama\", \"hidden_size\": 64, "
                                                LLAMA_REST "}"),
     FERRY_ERR_UNSUPPORTED, "Llama"},
    {"empty model_type", J("{\"model_type\": \"\", \"hidden_size\": 64, " LLAMA_REST "}"),
     FERRY_ERR_UNSUPPORTED, "model_type"},
    {"very long model_type",
     J("{\"model_type\": \"llama_llama_llama_llama_llama_llama_llama_llama\", \"hidden_size\": 64, "
       LLAMA_REST "}"),
     FERRY_ERR_UNSUPPORTED, "model_type"},

    /* ---- common integer fields ---- */
    {"missing hidden_size", J("{\"model_type\": \"llama\", " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"hidden_size null", J("{\"model_type\": \"llama\", \"hidden_size\": null, " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"hidden_size a string", J("{\"model_type\": \"llama\", \"hidden_size\": \"64\", " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"hidden_size a bool", J("{\"model_type\": \"llama\", \"hidden_size\": true, " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"hidden_size an array", J("{\"model_type\": \"llama\", \"hidden_size\": [64], " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"hidden_size fractional", J("{\"model_type\": \"llama\", \"hidden_size\": 64.5, " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"hidden_size 0", J("{\"model_type\": \"llama\", \"hidden_size\": 0, " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"hidden_size absurd", J("{\"model_type\": \"llama\", \"hidden_size\": 4194304, " LLAMA_REST "}"),
     FERRY_ERR_INVALID_CONFIG, "hidden_size"},
    {"negative vocab_size",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": -5}"),
     FERRY_ERR_INVALID_CONFIG, "vocab_size"},
    {"missing vocab_size",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 128}"),
     FERRY_ERR_INVALID_CONFIG, "vocab_size"},
    {"absurd num_hidden_layers",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 100000, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_hidden_layers"},
    {"num_hidden_layers 0",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 0, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_hidden_layers"},
    {"num_attention_heads 0",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 0, \"intermediate_size\": 128, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_attention_heads"},
    {"num_key_value_heads 0",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"num_key_value_heads\": 0, \"intermediate_size\": 128, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_key_value_heads"},
    {"heads not a multiple of kv heads",
     J("{\"model_type\": \"llama\", \"hidden_size\": 96, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 6, \"num_key_value_heads\": 4, \"intermediate_size\": 128, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_key_value_heads"},
    {"kv heads above heads",
     J("{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"num_key_value_heads\": 8, \"head_dim\": 16, "
       "\"intermediate_size\": 128, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_key_value_heads"},
    {"no head_dim, hidden not divisible by heads",
     J("{\"model_type\": \"llama\", \"hidden_size\": 100, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"intermediate_size\": 128, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "head_dim"},
    {"head_dim 0", J(LLAMA ", \"head_dim\": 0}"), FERRY_ERR_INVALID_CONFIG, "head_dim"},
    {"head_dim a string", J(LLAMA ", \"head_dim\": \"16\"}"), FERRY_ERR_INVALID_CONFIG, "head_dim"},
    {"missing intermediate_size",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "intermediate_size"},
    // Regression (fixed; GCC's UBSan cannot see it): get_int in
    // src/layout/hf_config.c evaluated `json_real_value(v) ==
    // (double)(int64_t)json_real_value(v)` before its +-9e15 range check, so
    // 1e30, -1e30 and 1e19 are converted to int64_t out of range, which is
    // undefined behaviour. clang -fsanitize=float-cast-overflow reports
    // "hf_config.c:37:65: runtime error: 1e+30 is outside the range of
    // representable values of type 'long'"; GCC's -fsanitize=undefined does
    // not include that check. On x86-64 the value is still rejected with the
    // right detail, which is what these cases check.
    {"huge real intermediate_size (1e30)",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 1e30, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "intermediate_size"},
    {"huge negative real intermediate_size (-1e30)",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": -1e30, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "intermediate_size"},
    {"real intermediate_size just above int64 (1e19)",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 1e19, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "intermediate_size"},
    {"intermediate_size 2^53 as a real",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 9007199254740992.0, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "intermediate_size"},
    {"intermediate_size int64 max",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 9223372036854775807, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "intermediate_size"},
    {"intermediate_size int64 min",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": -9223372036854775808, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "intermediate_size"},
    /* An integer literal beyond int64 is rejected by the JSON parser itself,
     * before any field is looked at; the detail gives the position. */
    {"huge integer literal intermediate_size (10^30)",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 1000000000000000000000000000000, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "line"},
    {"unknown torch_dtype", J(LLAMA ", \"torch_dtype\": \"bfloat17\"}"), FERRY_ERR_INVALID_CONFIG,
     "torch_dtype"},
    {"unknown torch_dtype named", J(LLAMA ", \"torch_dtype\": \"float128\"}"),
     FERRY_ERR_INVALID_CONFIG, "float128"},
    {"torch_dtype a number", J(LLAMA ", \"torch_dtype\": 16}"), FERRY_ERR_INVALID_CONFIG,
     "torch_dtype"},
    {"tie_word_embeddings a number", J(LLAMA ", \"tie_word_embeddings\": 1}"),
     FERRY_ERR_INVALID_CONFIG, "tie_word_embeddings"},
    {"tie_word_embeddings a string", J(LLAMA ", \"tie_word_embeddings\": \"true\"}"),
     FERRY_ERR_INVALID_CONFIG, "tie_word_embeddings"},
    {"attention_bias a number", J(LLAMA ", \"attention_bias\": 0}"), FERRY_ERR_INVALID_CONFIG,
     "attention_bias"},
    {"mlp_bias a string", J(LLAMA ", \"mlp_bias\": \"no\"}"), FERRY_ERR_INVALID_CONFIG, "mlp_bias"},

    /* ---- qwen3_moe ---- */
    {"qwen3_moe missing num_experts",
     J("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 4, "
       "\"num_attention_heads\": 4, \"head_dim\": 16, \"intermediate_size\": 128, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_experts"},
    {"qwen3_moe num_experts_per_tok > num_experts", J(QMOE ", \"num_experts_per_tok\": 8}"),
     FERRY_ERR_INVALID_CONFIG, "num_experts_per_tok"},
    {"qwen3_moe missing num_experts_per_tok", J(QMOE "}"), FERRY_ERR_INVALID_CONFIG,
     "num_experts_per_tok"},
    {"qwen3_moe moe_intermediate_size 0",
     J("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 4, "
       "\"num_attention_heads\": 4, \"head_dim\": 16, \"intermediate_size\": 128, "
       "\"vocab_size\": 1000, \"moe_intermediate_size\": 0, \"num_experts\": 4, "
       "\"num_experts_per_tok\": 2}"),
     FERRY_ERR_INVALID_CONFIG, "moe_intermediate_size"},
    {"qwen3_moe mlp_only_layers index out of range",
     J(QMOE ", \"num_experts_per_tok\": 2, \"mlp_only_layers\": [0, 4]}"),
     FERRY_ERR_INVALID_CONFIG, "mlp_only_layers"},
    {"qwen3_moe mlp_only_layers negative index",
     J(QMOE ", \"num_experts_per_tok\": 2, \"mlp_only_layers\": [-1]}"), FERRY_ERR_INVALID_CONFIG,
     "mlp_only_layers"},
    {"qwen3_moe mlp_only_layers string element",
     J(QMOE ", \"num_experts_per_tok\": 2, \"mlp_only_layers\": [\"1\"]}"),
     FERRY_ERR_INVALID_CONFIG, "mlp_only_layers"},
    {"qwen3_moe mlp_only_layers not an array",
     J(QMOE ", \"num_experts_per_tok\": 2, \"mlp_only_layers\": 1}"), FERRY_ERR_INVALID_CONFIG,
     "mlp_only_layers"},
    {"qwen3_moe mlp_only_layers an object",
     J(QMOE ", \"num_experts_per_tok\": 2, \"mlp_only_layers\": {\"1\": true}}"),
     FERRY_ERR_INVALID_CONFIG, "mlp_only_layers"},
    {"qwen3_moe decoder_sparse_step 0",
     J(QMOE ", \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 0}"), FERRY_ERR_INVALID_CONFIG,
     "decoder_sparse_step"},

    /* ---- deepseek_v3 / kimi_k2 ---- */
    {"deepseek_v3 attention_bias true", J(DS ", \"attention_bias\": true}"), FERRY_ERR_UNSUPPORTED,
     "attention_bias"},
    {"kimi_k2 attention_bias true",
     J("{\"model_type\": \"kimi_k2\", \"hidden_size\": 256, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 512, \"vocab_size\": 1024, "
       "\"kv_lora_rank\": 64, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 16, "
       "\"v_head_dim\": 24, \"attention_bias\": true}"),
     FERRY_ERR_UNSUPPORTED, "attention_bias"},
    {"deepseek_v3 missing kv_lora_rank", J(DS_BASE "}"), FERRY_ERR_INVALID_CONFIG, "kv_lora_rank"},
    {"deepseek_v3 kv_lora_rank 0", J(DS_BASE ", \"kv_lora_rank\": 0}"), FERRY_ERR_INVALID_CONFIG,
     "kv_lora_rank"},
    {"deepseek_v3 missing qk_rope_head_dim",
     J("{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 512, \"vocab_size\": 1024, "
       "\"kv_lora_rank\": 64, \"qk_nope_head_dim\": 32, \"v_head_dim\": 24}"),
     FERRY_ERR_INVALID_CONFIG, "qk_rope_head_dim"},
    {"deepseek_v3 q_lora_rank a string", J(DS ", \"q_lora_rank\": \"1536\"}"),
     FERRY_ERR_INVALID_CONFIG, "q_lora_rank"},
    {"deepseek_v3 num_experts_per_tok > n_routed_experts",
     J("{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 512, \"vocab_size\": 1024, "
       "\"kv_lora_rank\": 64, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 16, "
       "\"v_head_dim\": 24, \"n_routed_experts\": 8, \"num_experts_per_tok\": 9, "
       "\"moe_intermediate_size\": 96}"),
     FERRY_ERR_INVALID_CONFIG, "num_experts_per_tok"},
    {"deepseek_v3 too many MTP layers", J(DS ", \"num_nextn_predict_layers\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "num_nextn_predict_layers"},
    {"deepseek_v3 moe_layer_freq 0", J(DS ", \"moe_layer_freq\": 0}"), FERRY_ERR_INVALID_CONFIG,
     "moe_layer_freq"},
    {"deepseek_v3 topk_method a number", J(DS ", \"topk_method\": 1}"), FERRY_ERR_INVALID_CONFIG,
     "topk_method"},
};

// Regression (fixed): before the fix, a raw NUL byte right after a
// number or a true/false/null literal is silently skipped, so invalid JSON is
// accepted and, where the NUL replaces a number's last digit, the value
// silently changes: qwen3-0.6b.json with byte 155 (the last digit of
// "eos_token_id": 151645) set to NUL loads as FERRY_OK. Cause: jansson 2.14's
// lexer ungets the NUL that ends the number into its one-character buffer,
// where a 0 byte means "empty", so the NUL is lost; ferry handed the bytes to
// json_loadb without rejecting NULs. Expected FERRY_ERR_INVALID_CONFIG; got
// FERRY_OK and a model (second case: a model with vocab_size 100). These run
// after everything else so the other checks are not masked.
static const bad_case_t nul_bug_cases[] = {
    {"NUL byte right after a number",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64\0, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"NUL byte in place of a number's last digit",
     J("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 100\0}"),
     FERRY_ERR_INVALID_CONFIG, "config.json"},
    {"NUL byte right after true",
     J("{\"model_type\": \"llama\", \"tie_word_embeddings\": true\0, \"hidden_size\": 64, "
       "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 128, "
       "\"vocab_size\": 1000}"),
     FERRY_ERR_INVALID_CONFIG, "config.json"},
};

static void run_case(ferry_ctx_t *ctx, const bad_case_t *c) {
    /* an exactly-sized copy: reading past len is an ASan error */
    char *buf = malloc(c->len ? c->len : 1);
    CHECK(buf != NULL);
    memcpy(buf, c->json, c->len);
    ferry_model_t *out = NULL;
    ferry_status_t st = ferry_model_from_hf_config(ctx, "bad", buf, c->len, NULL, &out);
    const char *d = ferry_ctx_error(ctx);
    if (st != c->want || !strstr(d, c->needle) || out != NULL) {
        fprintf(stderr, "case \"%s\": got %s \"%s\"%s; expected %s containing \"%s\"\n", c->what,
                ferry_status_name(st), d, out ? " and a model" : "", ferry_status_name(c->want),
                c->needle);
        exit(1);
    }
    free(buf);
}

/* Cases that need options or a NULL argument. */
static void test_other_errors(ferry_ctx_t *ctx) {
    const char *ok = LLAMA "}";
    ferry_model_t *out = NULL;
    /* the base config is fine */
    CHECK_OK(ferry_model_from_hf_config(ctx, "ok", ok, strlen(ok), NULL, &out),
             ferry_ctx_error(ctx));
    CHECK(out != NULL);
    ferry_model_destroy(out);
    out = NULL;

    ferry_model_options_t bad_dtype = {.field_mask = FERRY_MODEL_OPT_DTYPE,
                                       .dtype = (ferry_dtype_t)99};
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "x", ok, strlen(ok), &bad_dtype, &out),
                FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), "dtype");
    CHECK(out == NULL);
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "x", NULL, 10, NULL, &out),
                FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), "json");
    CHECK(out == NULL);
    CHECK_FAILS(ferry_model_from_hf_config(ctx, NULL, ok, strlen(ok), NULL, &out),
                FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), "name");
    CHECK(out == NULL);
    CHECK(ferry_model_from_hf_config(ctx, "x", ok, strlen(ok), NULL, NULL) ==
          FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_model_from_hf_config(NULL, "x", ok, strlen(ok), NULL, &out) ==
          FERRY_ERR_INVALID_ARGUMENT);
    CHECK(out == NULL);

    /* a length shorter than the text: only the prefix is parsed */
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "x", ok, strlen(ok) - 1, NULL, &out),
                FERRY_ERR_INVALID_CONFIG, ferry_ctx_error(ctx), "line");
    CHECK(out == NULL);

    /* MTP layers pushing the layer count past FERRY_MAX_LAYERS */
    const char *deep = "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 64, "
                       "\"num_hidden_layers\": 1024, \"num_attention_heads\": 2, "
                       "\"intermediate_size\": 64, \"vocab_size\": 64, \"kv_lora_rank\": 16, "
                       "\"qk_nope_head_dim\": 8, \"qk_rope_head_dim\": 8, \"v_head_dim\": 8, "
                       "\"num_nextn_predict_layers\": 1}";
    ferry_model_options_t mtp = {.field_mask = FERRY_MODEL_OPT_MTP, .include_mtp = true};
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "deep", deep, strlen(deep), &mtp, &out),
                FERRY_ERR_LIMIT, ferry_ctx_error(ctx), "MTP");
    CHECK(out == NULL);

    /* errors on a config file name the path too */
    char path[1024];
    snprintf(path, sizeof path, "%s/qwen3-0.6b.json", FERRY_TEST_MODELS);
    CHECK_FAILS(ferry_model_from_hf_config_file(ctx, path, &bad_dtype, &out),
                FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), path);
    CHECK(strstr(ferry_ctx_error(ctx), "dtype") != NULL);
    CHECK(out == NULL);
}

/* A config file the test needs: present and not empty. */
static char *config_text(const char *path, size_t *len) {
    char *text = (char *)test_read_file(path, len);
    if (!text) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    CHECK(*len > 0);
    return text;
}

/* Every prefix of a bundled config fails with FERRY_ERR_INVALID_CONFIG except
 * the complete object: the full text, and the text without its trailing
 * whitespace (JSON does not need the final newline). */
static void test_truncations(ferry_ctx_t *ctx, const char *file, uint32_t want_tensors) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", FERRY_TEST_MODELS, file);
    size_t len;
    char *text = config_text(path, &len);
    size_t end = len; /* one past the closing brace */
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ' || text[end - 1] == '\r' ||
                       text[end - 1] == '\t'))
        end--;
    CHECK(end > 0 && text[end - 1] == '}');
    CHECK(len - end <= 2);
    int ok_count = 0;
    for (size_t n = 0; n <= len; n++) {
        char *buf = malloc(n ? n : 1); /* exactly n bytes: ASan sees any over-read */
        CHECK(buf != NULL);
        memcpy(buf, text, n);
        ferry_model_t *out = NULL;
        ferry_status_t st = ferry_model_from_hf_config(ctx, file, buf, n, NULL, &out);
        if (n < end) {
            if (st != FERRY_ERR_INVALID_CONFIG || out != NULL || ferry_ctx_error(ctx)[0] == '\0') {
                fprintf(stderr, "%s: prefix of %zu/%zu bytes gave %s \"%s\"%s; expected "
                                "FERRY_ERR_INVALID_CONFIG\n",
                        file, n, len, ferry_status_name(st), ferry_ctx_error(ctx),
                        out ? " and a model" : "");
                exit(1);
            }
        } else {
            if (st != FERRY_OK || out == NULL) {
                fprintf(stderr, "%s: prefix of %zu/%zu bytes (complete object) gave %s \"%s\"\n",
                        file, n, len, ferry_status_name(st), ferry_ctx_error(ctx));
                exit(1);
            }
            CHECK_EQ_INT(ferry_model_tensor_count(out), want_tensors);
            ferry_model_destroy(out);
            ok_count++;
        }
        free(buf);
    }
    CHECK_EQ_INT(ok_count, (int)(len - end) + 1);
    free(text);
}

// Regression (see nul_bug_cases): the full text with any one byte replaced by NUL
// must never load; the length says where input ends, and a NUL inside is not
// a terminator. The committed library accepts it where the NUL lands right
// after a number.
static void test_nul_substitutions(ferry_ctx_t *ctx, const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", FERRY_TEST_MODELS, file);
    size_t len;
    char *text = config_text(path, &len);
    size_t end = len;
    while (end > 0 && text[end - 1] != '}') end--;
    for (size_t n = 0; n < end; n++) {
        char *buf = malloc(len);
        CHECK(buf != NULL);
        memcpy(buf, text, len);
        buf[n] = '\0';
        ferry_model_t *out = NULL;
        ferry_status_t st = ferry_model_from_hf_config(ctx, file, buf, len, NULL, &out);
        if (st != FERRY_ERR_INVALID_CONFIG || out != NULL) {
            fprintf(stderr, "%s: byte %zu (%#04x) replaced by NUL gave %s%s; expected "
                            "FERRY_ERR_INVALID_CONFIG\n",
                    file, n, (unsigned)(unsigned char)text[n], ferry_status_name(st),
                    out ? " and a model" : "");
            exit(1);
        }
        free(buf);
    }
    free(text);
}

/* Parallel specs: a key given twice would silently take its last value, an
 * empty entry is a typo; both refused, naming the key or the spec, with
 * *out untouched. */
static void test_parallel_specs(ferry_ctx_t *ctx) {
    static const struct {
        ferry_side_t side;
        const char *spec, *needle;
    } bad[] = {
        {FERRY_SIDE_TRAIN, "tp=2,tp=4", "key \"tp\" is given twice"},
        {FERRY_SIDE_TRAIN, "tp=2,pp=2,tp=2", "key \"tp\" is given twice"},
        {FERRY_SIDE_TRAIN, "pp_layers=1+1,pp=2,pp_layers=2", "key \"pp_layers\" is given twice"},
        {FERRY_SIDE_TRAIN, "experts=grouped,experts=grouped_t", "key \"experts\" is given twice"},
        {FERRY_SIDE_INFER, "buffers=flat,buffers=param", "key \"buffers\" is given twice"},
        {FERRY_SIDE_INFER, "transpose=*w2*,transpose=*w1*", "key \"transpose\" is given twice"},
        {FERRY_SIDE_INFER, "replicas=2,tp=2,replicas=2", "key \"replicas\" is given twice"},
        {FERRY_SIDE_INFER, "tp=2,,replicas=2", "an empty entry"},
        {FERRY_SIDE_INFER, "tp=2,", "an empty entry"},
        {FERRY_SIDE_INFER, ",tp=2", "an empty entry"},
        {FERRY_SIDE_INFER, ",", "an empty entry"},
        {FERRY_SIDE_TRAIN, "tp=4294967297", "tp=4294967297 is not an integer"},
        {FERRY_SIDE_TRAIN, "tp=-1", "tp=-1 is not an integer"},
        {FERRY_SIDE_TRAIN, "tp=2x", "tp=2x is not an integer"},
        {FERRY_SIDE_TRAIN, "tp=", "tp= is not an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ferry_parallel_t p;
        memset(&p, 0x5a, sizeof p);
        ferry_parallel_t before = p;
        ferry_status_t st = ferry_parallel_parse(ctx, bad[i].side, bad[i].spec, &p);
        if (st != FERRY_ERR_INVALID_CONFIG || !strstr(ferry_ctx_error(ctx), bad[i].needle)) {
            fprintf(stderr, "parallel spec \"%s\": %s \"%s\"; expected FERRY_ERR_INVALID_CONFIG with \"%s\"\n",
                    bad[i].spec, ferry_status_name(st), ferry_ctx_error(ctx), bad[i].needle);
            exit(1);
        }
        CHECK(memcmp(&p, &before, sizeof p) == 0);
    }
    /* the same keys once each still parse; "" is the defaults */
    ferry_parallel_t p;
    CHECK_OK(ferry_parallel_parse(ctx, FERRY_SIDE_TRAIN, "tp=2,pp=2,pp_layers=14+14,experts=grouped_t", &p),
             ferry_ctx_error(ctx));
    CHECK_EQ_INT(p.tp, 2);
    CHECK_EQ_INT(p.num_pp_layers, 2);
    CHECK_OK(ferry_parallel_parse(ctx, FERRY_SIDE_INFER, "", &p), ferry_ctx_error(ctx));
    CHECK_EQ_INT(p.tp, 1);
}

int main(void) {
    ferry_ctx_t *ctx = test_ctx();
    test_parallel_specs(ctx);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(ctx, &cases[i]);
    test_other_errors(ctx);
    /* qwen3-0.6b: 1 + 28 * 11 + 1 tensors (tied embeddings) */
    test_truncations(ctx, "qwen3-0.6b", 1 + 28 * 11 + 1);
    test_truncations(ctx, "qwen3-8b", 1 + 36 * 11 + 1 + 1);
    test_truncations(ctx, "qwen3-30b-a3b", 1 + 48 * (2 + 6 + 1 + 128 * 3) + 1 + 1);
    /* known bugs last */
    for (size_t i = 0; i < sizeof nul_bug_cases / sizeof nul_bug_cases[0]; i++)
        run_case(ctx, &nul_bug_cases[i]);
    test_nul_substitutions(ctx, "qwen3-0.6b");
    ferry_ctx_destroy(ctx);
    return 0;
}
