/* Fuzz target: config.json text -> model spec -> (when small) a layout that
 * must validate. The parser must reject bad input with an error, never crash,
 * and anything it accepts must lay out cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferry/ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void try_layout(ferry_ctx_t *ctx, const ferry_model_t *m, ferry_side_t side, const char *spec) {
    ferry_parallel_t p;
    if (ferry_parallel_parse(ctx, side, spec, &p) != FERRY_OK) abort();
    ferry_layout_t *l = NULL;
    if (ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l) != FERRY_OK) return; /* sizes may not divide */
    ferry_coverage_t cov;
    if (ferry_layout_validate(l, &cov) != FERRY_OK) {
        fprintf(stderr, "accepted config gave an invalid layout (%s): %s\n", spec, ferry_layout_error(l));
        abort();
    }
    ferry_layout_destroy(l);
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
    ferry_ctx_destroy(ctx);
    return 0;
}
