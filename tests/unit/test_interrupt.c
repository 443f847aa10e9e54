/* The context's interrupt hook (ctx.h) ends blocked calls early: a reader
 * waiting for a version nobody publishes, a sync publish waiting for a
 * reader's acknowledgement, a publish waiting for the layout epoch, a table
 * get waiting for a sequence nobody completes. Each returns
 * FERRY_ERR_INTERRUPTED within a few hook periods of the hook saying stop
 * (timeouts are 30 s), the hook runs only on the calling thread, and the
 * object works afterwards (a hook saying 0 changes nothing). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "layout_check.h"
#include "ferry/ferry.h"

#define LONG_MS 30000

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Armed: says stop from 0.2 s after arming on. Counts its calls and
 * remembers any call from a thread other than the armer's. */
static struct {
    atomic_int armed;
    double at;
    pthread_t owner;
    atomic_int calls, foreign;
} hook_state;

static int hook(void *opaque) {
    (void)opaque;
    atomic_fetch_add(&hook_state.calls, 1);
    if (!atomic_load(&hook_state.armed)) return 0;
    if (!pthread_equal(pthread_self(), hook_state.owner)) atomic_fetch_add(&hook_state.foreign, 1);
    return now_s() - hook_state.at > 0.2;
}

static void arm(void) {
    hook_state.owner = pthread_self();
    hook_state.at = now_s();
    atomic_store(&hook_state.calls, 0);
    atomic_store(&hook_state.armed, 1);
}

/* The status of a call expected to be interrupted, and that it was so
 * within 3 s (0.2 s to arm, 0.1 s polling, a loaded machine's slack). */
static void expect_interrupted(ferry_status_t st, const char *detail, const char *what) {
    double took = now_s() - hook_state.at;
    atomic_store(&hook_state.armed, 0);
    if (st != FERRY_ERR_INTERRUPTED || took > 3.0 || atomic_load(&hook_state.calls) < 2) {
        fprintf(stderr, "%s: status %s after %.2f s, %d hook calls: %s\n", what, ferry_status_name(st), took,
                atomic_load(&hook_state.calls), detail);
        exit(1);
    }
    CHECK_STR_HAS(detail, "interrupted");
    printf("%s: interrupted after %.2f s (%d hook calls): %s\n", what, took, atomic_load(&hook_state.calls), detail);
}

typedef struct {
    ferry_reader_t *r;
    uint64_t version;
    ferry_status_t st;
} update_arg_t;

static void *update_main(void *p) {
    update_arg_t *a = p;
    a->st = ferry_reader_update(a->r, a->version, LONG_MS, NULL);
    return NULL;
}

/* Publishes version v in sync mode while the reader updates to it. */
static void round_trip(ferry_writer_t *w, ferry_reader_t *r, uint64_t v) {
    update_arg_t a = {r, v, FERRY_OK};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, update_main, &a) == 0);
    CHECK_OK(ferry_writer_publish(w, v, NULL), ferry_writer_error(w));
    pthread_join(t, NULL);
    CHECK_OK(a.st, ferry_reader_error(r));
    CHECK_EQ_INT(ferry_reader_version(r), v);
}

int main(void) {
    ferry_ctx_params_t cp = {.field_mask = FERRY_CTX_PARAM_INTERRUPT, .interrupt_fn = hook};
    ferry_ctx_t *ctx;
    CHECK_OK(ferry_ctx_create(&cp, &ctx, NULL, 0), "ctx");
    ferry_model_t *model;
    CHECK_OK(ferry_model_from_hf_config_file(ctx, FERRY_TEST_GOLDEN "/tiny-qwen3.json", NULL, &model),
             ferry_ctx_error(ctx));
    ferry_layout_t *lay = build_layout(ctx, model, FERRY_SIDE_TRAIN, "tp=1");
    uint32_t nb = ferry_layout_buffer_count(lay);
    void **wb = calloc(nb, sizeof *wb), **rb = calloc(nb, sizeof *rb);
    CHECK(wb && rb);

    ferry_sync_params_t wp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN | FERRY_SYNC_PARAM_TIMEOUT_MS |
                                            FERRY_SYNC_PARAM_DELTAS,
                              .job = "interrupt", .rank = 0, .world = 1, .meta = "127.0.0.1:0", .token = "t",
                              .timeout_ms = LONG_MS, .deltas = FERRY_SYNC_DELTAS_OFF};
    ferry_writer_t *w;
    CHECK_OK(ferry_writer_create(ctx, model, &wp, &w), ferry_ctx_error(ctx));
    CHECK_OK(ferry_writer_add_layout(w, lay, 0, wb, nb), ferry_writer_error(w));
    CHECK_OK(ferry_writer_commit(w), ferry_writer_error(w));
    ferry_sync_params_t rp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN | FERRY_SYNC_PARAM_TIMEOUT_MS,
                              .job = "interrupt", .rank = 0, .world = 1, .meta = ferry_writer_service_address(w),
                              .token = "t", .timeout_ms = LONG_MS};
    ferry_reader_t *r;
    CHECK_OK(ferry_reader_create(ctx, model, &rp, &r), ferry_ctx_error(ctx));
    CHECK_OK(ferry_reader_add_layout(r, lay, 0, rb, nb), ferry_reader_error(r));

    /* (c) the layout epoch: the reader has not committed */
    arm();
    ferry_status_t st = ferry_writer_publish(w, 1, NULL);
    expect_interrupted(st, ferry_writer_error(w), "publish waiting for the epoch");
    CHECK_OK(ferry_reader_commit(r), ferry_reader_error(r));

    /* (a) a version nobody publishes */
    arm();
    st = ferry_reader_update(r, 1, LONG_MS, NULL);
    expect_interrupted(st, ferry_reader_error(r), "update waiting for a version");

    /* the hook saying 0: a normal round trip, bytes checked */
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(lay, b, &bi);
        for (uint64_t k = 0; k < bi.size; k++) ((uint8_t *)wb[b])[k] = (uint8_t)(k * 7 + b);
    }
    round_trip(w, r, 1);
    CHECK(check_layout_copy(model, lay, lay, wb, rb) > 0);

    /* (b) sync publish waiting for the reader's acknowledgement */
    arm();
    st = ferry_writer_publish(w, 2, NULL);
    expect_interrupted(st, ferry_writer_error(w), "publish waiting for acknowledgements");
    round_trip(w, r, 3); /* the writer and the reader both still work */
    CHECK(check_layout_copy(model, lay, lay, wb, rb) > 0);
    ferry_reader_destroy(r);

    /* (d) a table get of a sequence one of two members never completes */
    ferry_sync_params_t tp = {.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN | FERRY_SYNC_PARAM_TIMEOUT_MS,
                              .job = "interrupt", .rank = 0, .world = 2, .meta = ferry_writer_service_address(w),
                              .token = "t", .timeout_ms = LONG_MS};
    ferry_table_t *t0, *t1;
    CHECK_OK(ferry_table_create(ctx, &tp, &t0), ferry_ctx_error(ctx));
    tp.rank = 1;
    CHECK_OK(ferry_table_create(ctx, &tp, &t1), ferry_ctx_error(ctx));
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    int64_t shape[1] = {4};
    ferry_table_entry_t e = {.name = "x", .dtype = FERRY_DTYPE_F32, .ndim = 1, .shape = shape,
                             .box = ferry_box_of_shape(1, shape), .data = x};
    CHECK_OK(ferry_table_put(t0, 7, &e), ferry_table_error(t0));
    CHECK_OK(ferry_table_complete(t0, 7), ferry_table_error(t0));
    ferry_table_entry_t g = e;
    g.data = y;
    arm();
    st = ferry_table_get(t0, 7, &g, LONG_MS);
    expect_interrupted(st, ferry_table_error(t0), "table get waiting for a member");
    CHECK_OK(ferry_table_complete(t1, 7), ferry_table_error(t1));
    CHECK_OK(ferry_table_get(t0, 7, &g, LONG_MS), ferry_table_error(t0));
    CHECK(memcmp(x, y, sizeof x) == 0);
    ferry_table_destroy(t1);
    ferry_table_destroy(t0);

    CHECK_EQ_INT(atomic_load(&hook_state.foreign), 0); /* never from ferry's own threads */
    ferry_writer_destroy(w);
    free(wb), free(rb);
    ferry_layout_destroy(lay);
    ferry_model_destroy(model);
    ferry_ctx_destroy(ctx);
    printf("test_interrupt: epoch, version, acknowledgement and table waits end on the hook; objects work after\n");
    return 0;
}
