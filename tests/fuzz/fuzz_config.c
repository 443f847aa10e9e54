/* Fuzz target: config.json text -> model spec -> (when small) a layout that
 * must validate. The parser must reject bad input with an error, never crash,
 * and anything it accepts must lay out cleanly. The same text read with
 * quant auto (quantization_config) must give consistent fp8 pairs or a
 * refusal that says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferry/ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void try_layout(ferry_ctx_t *ctx, const ferry_model_t *m, ferry_side_t side, const char *spec) {
    ferry_parallel_t p;
    if (ferry_parallel_parse(ctx, side, spec, &p) != FERRY_OK) abort();
    ferry_layout_t *l = NULL;
    ferry_status_t st = ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l);
    if (st != FERRY_OK) { /* sizes may not divide, fp8 shards may cut blocks: said why */
        if (ferry_ctx_error(ctx)[0] == '\0') abort();
        return;
    }
    ferry_coverage_t cov;
    if (ferry_layout_validate(l, &cov) != FERRY_OK) {
        fprintf(stderr, "accepted config gave an invalid layout (%s): %s\n", spec, ferry_layout_error(l));
        abort();
    }
    ferry_layout_destroy(l);
}

/* An fp8 engine's spec (quant auto): every pair names each other, weights
 * F8_E4M3, scales F32 of ceil(rows/128) x ceil(cols/128); engine layouts of
 * it validate (scales mirroring weights) or are refused saying why, and a
 * trainer layout of it is refused. */
static void try_quant(ferry_ctx_t *ctx, const uint8_t *data, size_t size) {
    ferry_model_options_t o = {.field_mask = FERRY_MODEL_OPT_QUANT, .quant = FERRY_MODEL_QUANT_AUTO};
    ferry_model_t *m = NULL;
    if (ferry_model_from_hf_config(ctx, "fuzz", (const char *)data, size, &o, &m) != FERRY_OK) {
        if (ferry_ctx_error(ctx)[0] == '\0') abort();
        return;
    }
    uint32_t nt = ferry_model_tensor_count(m), weights = 0;
    for (uint32_t t = 0; t < nt; t++) {
        ferry_tensor_info_t ti, pi;
        ferry_tensor_quant_t q, pq;
        if (!ferry_model_tensor(m, t, &ti) || !ferry_model_tensor_quant(m, t, &q)) abort();
        if (q.kind != FERRY_QUANT_FP8_BLOCK) continue;
        weights++;
        if (!ferry_model_tensor(m, q.partner, &pi) || !ferry_model_tensor_quant(m, q.partner, &pq)) abort();
        if (pq.kind != FERRY_QUANT_FP8_SCALE || pq.partner != t || ti.dtype != FERRY_DTYPE_F8_E4M3 ||
            pi.dtype != FERRY_DTYPE_F32 || ti.ndim != 2 || pi.ndim != 2 ||
            pi.shape[0] != (ti.shape[0] + 127) / 128 || pi.shape[1] != (ti.shape[1] + 127) / 128)
            abort();
    }
    if (weights != ferry_model_quant_count(m)) abort();
    if (weights && nt <= 4096) {
        try_layout(ctx, m, FERRY_SIDE_INFER, "tp=2,ep=2");
        try_layout(ctx, m, FERRY_SIDE_INFER, "tp=4,dp=2,ep=1,replicas=2");
        ferry_parallel_t p = ferry_parallel_defaults(FERRY_SIDE_TRAIN);
        ferry_layout_t *l = NULL;
        if (ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l) != FERRY_ERR_UNSUPPORTED) abort();
    }
    ferry_model_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ferry_ctx_t *ctx = NULL;
    if (ferry_ctx_create(NULL, &ctx, NULL, 0) != FERRY_OK) abort();
    ferry_model_t *m = NULL;
    ferry_status_t st = ferry_model_from_hf_config(ctx, "fuzz", (const char *)data, size, NULL, &m);
    if (st == FERRY_OK) {
        if (ferry_model_tensor_count(m) == 0) abort();
        /* keep each input fast: lay out only modest specs */
        if (ferry_model_tensor_count(m) <= 4096) {
            try_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2,pp=2,dp=2");
            try_layout(ctx, m, FERRY_SIDE_INFER, "tp=4,ep=2,replicas=2");
        }
        ferry_model_destroy(m);
    } else if (ferry_ctx_error(ctx)[0] == '\0') {
        abort(); /* every failure must say why */
    }
    try_quant(ctx, data, size);
    ferry_ctx_destroy(ctx);
    return 0;
}
