/* The context fuzz targets share: created once, logging off (a target runs
 * millions of inputs, and refusals are expected). */
#ifndef FERRY_FUZZ_CTX_H
#define FERRY_FUZZ_CTX_H

#include <stdlib.h>

#include "ferry/ferry.h"

static inline ferry_ctx_t *fuzz_ctx(void) {
    static ferry_ctx_t *ctx;
    if (!ctx) {
        ferry_ctx_params_t p = {.field_mask = FERRY_CTX_PARAM_LOG_LEVEL, .log_level = FERRY_LOG_OFF};
        if (ferry_ctx_create(&p, &ctx, NULL, 0) != FERRY_OK) abort();
    }
    return ctx;
}

#endif
