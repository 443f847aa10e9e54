/* A writer that serves the metadata service itself (writer rank 0's
 * default), a reader that finds it by the writer's address, in one process:
 * async versions sync and verify; the reader's copy matches the writer's
 * buffers byte for byte after each update. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layout_check.h"
#include "ferry/ferry.h"

int main(void) {
    ferry_ctx_t *ctx;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    ferry_model_t *model;
    CHECK_OK(ferry_model_from_hf_config_file(ctx, FERRY_TEST_GOLDEN "/tiny-qwen3.json", NULL, &model),
             ferry_ctx_error(ctx));
    ferry_layout_t *src = build_layout(ctx, model, FERRY_SIDE_TRAIN, "tp=1"), *dst = build_layout(ctx, model, FERRY_SIDE_INFER, "tp=1");

    /* the writer serves (rank 0's default) on a free port */
    ferry_sync_params_t wp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN | FERRY_SYNC_PARAM_MODE |
                                            FERRY_SYNC_PARAM_TIMEOUT_MS,
                              .job = "embedded", .rank = 0, .world = 1, .meta = "127.0.0.1:0", .token = "t",
                              .mode = FERRY_SYNC_MODE_ASYNC, .timeout_ms = 60000};
    ferry_writer_t *w;
    CHECK_OK(ferry_writer_create(ctx, model, &wp, &w), ferry_ctx_error(ctx));
    const char *addr = ferry_writer_service_address(w);
    CHECK(addr[0] != '\0' && strstr(addr, "127.0.0.1:") && strcmp(addr, "127.0.0.1:0") != 0);

    ferry_sync_params_t rp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN | FERRY_SYNC_PARAM_TIMEOUT_MS,
                              .job = "embedded", .rank = 0, .world = 1, .meta = addr, .token = "t", .timeout_ms = 60000};
    ferry_reader_t *r;
    CHECK_OK(ferry_reader_create(ctx, model, &rp, &r), ferry_ctx_error(ctx));

    /* one buffer per parameter on both sides, same shapes (tp=1): equal bytes after a sync */
    uint32_t nb = ferry_layout_buffer_count(src);
    CHECK_EQ_INT(nb, ferry_layout_buffer_count(dst));
    void **wb = calloc(nb, sizeof *wb), **rb = calloc(nb, sizeof *rb);
    uint64_t *size = calloc(nb, sizeof *size);
    CHECK(wb && rb && size);
    CHECK_OK(ferry_writer_add_layout(w, src, 0, wb, nb), ferry_writer_error(w));
    CHECK_OK(ferry_reader_add_layout(r, dst, 0, rb, nb), ferry_reader_error(r));
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(src, b, &bi);
        size[b] = bi.size;
        CHECK(wb[b] && rb[b]);
    }
    CHECK_OK(ferry_writer_commit(w), ferry_writer_error(w));
    CHECK_OK(ferry_reader_commit(r), ferry_reader_error(r));

    for (uint64_t v = 1; v <= 3; v++) {
        for (uint32_t b = 0; b < nb; b++)
            for (uint64_t k = 0; k < size[b]; k++) ((uint8_t *)wb[b])[k] = (uint8_t)(k * 31 + b * 7 + v * 13);
        ferry_publish_info_t pi;
        CHECK_OK(ferry_writer_publish(w, v, &pi), ferry_writer_error(w));
        ferry_update_info_t ui;
        CHECK_OK(ferry_reader_update(r, FERRY_VERSION_LATEST, 60000, &ui), ferry_reader_error(r));
        CHECK_EQ_INT(ui.version, v);
        CHECK_EQ_INT(ferry_reader_version(r), v);
        /* every element of every engine piece equals the trainer's element */
        CHECK(check_layout_copy(model, src, dst, wb, rb) > 0);
    }
    /* the reader already holds the newest: LATEST returns at once, NEXT times out */
    CHECK_OK(ferry_reader_update(r, FERRY_VERSION_LATEST, 60000, NULL), ferry_reader_error(r));
    CHECK(ferry_reader_update(r, FERRY_VERSION_NEXT, 200, NULL) == FERRY_ERR_TIMEOUT);
    CHECK_EQ_INT(ferry_reader_version(r), 3);

    ferry_reader_destroy(r);
    ferry_writer_destroy(w);
    free(wb), free(rb), free(size);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(model);
    ferry_ctx_destroy(ctx);
    printf("test_sync_embedded: a writer serving the service, a reader finding it by address, 3 async versions\n");
    return 0;
}
