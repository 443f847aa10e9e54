/* Fuzz target: chan_manifest_parse on arbitrary bytes (a channel
 * directory's manifest.json, which any writer of the directory controls).
 *
 * A refusal must leave a detail and an empty manifest. An accepted one must
 * hold together (versions ascending, file names the channel may open, each
 * sum's tensor named once), and formatting it and parsing the text again
 * must give the same versions, files, sizes, bases and sums. Never a crash
 * or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel/channel_internal.h"
#include "fuzz_ctx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(why)                                                                       \
    do {                                                                                \
        fprintf(stderr, "fuzz_channel_manifest: %s (%zu-byte input)\n", (why), size);  \
        abort();                                                                        \
    } while (0)

static void check_same(const chan_manifest_t *a, const chan_manifest_t *b, size_t size) {
    if (a->n != b->n) FAIL("format + parse changed the version count");
    for (size_t i = 0; i < a->n; i++) {
        const chan_version_t *x = &a->v[i], *y = &b->v[i];
        if (x->version != y->version || strcmp(x->snapshot, y->snapshot) || strcmp(x->delta, y->delta) ||
            x->snapshot_bytes != y->snapshot_bytes || x->delta_bytes != y->delta_bytes || x->base != y->base ||
            x->n_sums != y->n_sums)
            FAIL("format + parse changed a version");
        for (size_t k = 0; k < x->n_sums; k++) {
            uint64_t s;
            if (!chan_version_sum(y, x->sums[k].name, &s) || s != x->sums[k].sum) FAIL("format + parse changed a sum");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ferry_ctx_t *ctx = fuzz_ctx();
    chan_manifest_t m;
    if (chan_manifest_parse(ctx, "input", data, size, &m) != FERRY_OK) {
        if (!ferry_ctx_error(ctx)[0]) FAIL("refused without a detail");
        if (m.n || m.v) FAIL("refused but left versions");
        return 0;
    }
    for (size_t i = 0; i < m.n; i++) {
        const chan_version_t *v = &m.v[i];
        if (i > 0 && v->version <= m.v[i - 1].version) FAIL("versions not ascending");
        if ((v->snapshot[0] && !chan_name_ok(v->snapshot)) || (v->delta[0] && !chan_name_ok(v->delta)))
            FAIL("a file name the channel may not open");
        for (size_t k = 0; k < v->n_sums; k++)
            for (size_t j = k + 1; j < v->n_sums; j++)
                if (!strcmp(v->sums[k].name, v->sums[j].name)) FAIL("a tensor's sum listed twice");
    }
    char *text;
    if (chan_manifest_format(ctx, &m, &text) != FERRY_OK) FAIL("an accepted manifest does not format");
    chan_manifest_t again;
    if (chan_manifest_parse(ctx, "formatted", text, strlen(text), &again) != FERRY_OK) {
        fprintf(stderr, "%s\n", ferry_ctx_error(ctx));
        FAIL("the formatted manifest is refused");
    }
    check_same(&m, &again, size);
    free(text);
    chan_manifest_clear(ctx, &again);
    chan_manifest_clear(ctx, &m);
    return 0;
}
