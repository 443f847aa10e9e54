/* Fuzz target: parallel spec strings. Accepted specs must format back to a
 * spec that parses to the same configuration. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4200) return 0;
    ferry_ctx_t *ctx = NULL;
    if (ferry_ctx_create(NULL, &ctx, NULL, 0) != FERRY_OK) abort();
    ferry_side_t side = (data[0] & 1) ? FERRY_SIDE_INFER : FERRY_SIDE_TRAIN;
    char *spec = malloc(size);
    if (!spec) abort();
    memcpy(spec, data + 1, size - 1);
    spec[size - 1] = '\0';
    ferry_parallel_t p, q;
    if (ferry_parallel_parse(ctx, side, spec, &p) == FERRY_OK) {
        char again[4096];
        ferry_parallel_format(&p, again, sizeof again);
        if (ferry_parallel_parse(ctx, side, again, &q) != FERRY_OK) abort();
        char third[4096];
        ferry_parallel_format(&q, third, sizeof third);
        if (strcmp(again, third) != 0) abort();
    } else if (ferry_ctx_error(ctx)[0] == '\0') {
        abort();
    }
    free(spec);
    ferry_ctx_destroy(ctx);
    return 0;
}
