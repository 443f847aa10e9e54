/* When a member leaves, the errors that follow name it: role, rank, host,
 * pid, why it left and what it was doing. Two writers and two readers of a
 * small model in one process, a standalone service:
 * - writer 0 leaves after version 1; writer 1 publishes version 2, which can
 *   never be ready. A reader asking for exactly version 2 is refused once
 *   writer 1 lets it go: the refusal must name writer 0 (who left without
 *   publishing it), not only writer 1. A reader asking for the next version
 *   times out naming writer 0. Writer 1's publish (version 2 never ready) is
 *   logged naming writer 0. The same with writer 1 leaving.
 * - a reader leaves before committing: a writer's publish times out naming
 *   that reader as gone (not only "has not committed").
 * - a reader leaves in the middle of the job: the writer's next publish is
 *   acknowledged by the other reader only, and the writer's log names the
 *   reader that left.
 * Every wait is for an event (a call returning); the service's timeouts that
 * the checks expect to expire are short, and nothing else has to finish
 * within them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "layout_check.h"
#include "ferry/ferry.h"

#define HANG_GUARD_MS 120000 /* a reader's update: only to stop a hang */

static ferry_ctx_t *ctx;
static ferry_model_t *model;
static ferry_layout_t *src, *dst;
static char host[256], pid_text[32];

/* The log, kept so that checks can look for a line (writers log what they
 * cannot return as an error). */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 16];
static size_t log_len;

static void log_fn(void *opaque, ferry_log_level_t level, const char *message) {
    (void)opaque;
    if (level < FERRY_LOG_WARN) return;
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(message);
    if (log_len + n + 2 < sizeof log_text) {
        memcpy(log_text + log_len, message, n);
        log_len += n;
        log_text[log_len++] = '\n';
        log_text[log_len] = '\0';
    }
    pthread_mutex_unlock(&log_mu);
}

static void log_clear(void) {
    pthread_mutex_lock(&log_mu);
    log_len = 0;
    log_text[0] = '\0';
    pthread_mutex_unlock(&log_mu);
}

/* A log line holding every needle. */
static bool log_has(const char *a, const char *b, const char *c) {
    pthread_mutex_lock(&log_mu);
    bool found = false;
    for (char *line = log_text; *line && !found;) {
        char *end = strchr(line, '\n');
        *end = '\0';
        found = strstr(line, a) && strstr(line, b) && strstr(line, c);
        *end = '\n';
        line = end + 1;
    }
    pthread_mutex_unlock(&log_mu);
    return found;
}

typedef struct job {
    ferry_meta_service_t *svc;
    ferry_writer_t *w[2];
    ferry_reader_t *r[2];
    void *wb[2][64], *rb[2][64];
    uint32_t wn[2], rn[2];
    uint32_t writer_timeout_ms;
} job_t;

static ferry_sync_params_t params(const job_t *j, uint32_t rank, uint32_t timeout_ms) {
    return (ferry_sync_params_t){.field_mask = FERRY_SYNC_PARAM_META | FERRY_SYNC_PARAM_TOKEN |
                                               FERRY_SYNC_PARAM_TIMEOUT_MS | FERRY_SYNC_PARAM_SERVE,
                                 .job = "blame", .rank = rank, .world = 2,
                                 .meta = ferry_meta_service_address(j->svc), .token = "blame-token",
                                 .timeout_ms = timeout_ms, .serve = false};
}

static uint32_t rank_buffers(const ferry_layout_t *l, uint32_t rank) {
    uint32_t n = 0;
    for (uint32_t b = 0; b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        n += bi.rank == rank;
    }
    CHECK(n <= 64);
    return n;
}

static void writer_start(job_t *j, uint32_t rank) {
    ferry_sync_params_t p = params(j, rank, j->writer_timeout_ms);
    CHECK_OK(ferry_writer_create(ctx, model, &p, &j->w[rank]), ferry_ctx_error(ctx));
    j->wn[rank] = rank_buffers(src, rank);
    memset(j->wb[rank], 0, sizeof j->wb[rank]);
    CHECK_OK(ferry_writer_add_layout(j->w[rank], src, rank, j->wb[rank], j->wn[rank]), ferry_writer_error(j->w[rank]));
    CHECK_OK(ferry_writer_commit(j->w[rank]), ferry_writer_error(j->w[rank]));
}

static void reader_start(job_t *j, uint32_t rank, bool commit) {
    ferry_sync_params_t p = params(j, rank, 30000);
    CHECK_OK(ferry_reader_create(ctx, model, &p, &j->r[rank]), ferry_ctx_error(ctx));
    j->rn[rank] = rank_buffers(dst, rank);
    memset(j->rb[rank], 0, sizeof j->rb[rank]);
    CHECK_OK(ferry_reader_add_layout(j->r[rank], dst, rank, j->rb[rank], j->rn[rank]), ferry_reader_error(j->r[rank]));
    if (commit) CHECK_OK(ferry_reader_commit(j->r[rank]), ferry_reader_error(j->r[rank]));
}

static void job_start(job_t *j, uint32_t writer_timeout_ms) {
    memset(j, 0, sizeof *j);
    j->writer_timeout_ms = writer_timeout_ms;
    ferry_meta_params_t mp = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN,
                              .listen = "127.0.0.1:0",
                              .token = "blame-token"};
    CHECK_OK(ferry_meta_service_create(ctx, &mp, &j->svc), ferry_ctx_error(ctx));
}

static void job_end(job_t *j) {
    for (int i = 0; i < 2; i++) {
        ferry_writer_destroy(j->w[i]);
        ferry_reader_destroy(j->r[i]);
    }
    ferry_meta_service_destroy(j->svc);
}

/* ---- calls in threads --------------------------------------------------------- */

typedef struct call {
    pthread_t th;
    ferry_writer_t *w;
    ferry_reader_t *r;
    uint64_t version;
    uint32_t timeout_ms;
    ferry_status_t st;
    char err[1024];
    ferry_publish_info_t pub;
    ferry_update_info_t upd;
} call_t;

static void *call_main(void *arg) {
    call_t *c = arg;
    if (c->w) {
        c->st = ferry_writer_publish(c->w, c->version, &c->pub);
        snprintf(c->err, sizeof c->err, "%s", c->st ? ferry_writer_error(c->w) : "");
    } else {
        c->st = ferry_reader_update(c->r, c->version, c->timeout_ms, &c->upd);
        snprintf(c->err, sizeof c->err, "%s", c->st ? ferry_reader_error(c->r) : "");
    }
    return NULL;
}

static void call_start(call_t *c) { CHECK(pthread_create(&c->th, NULL, call_main, c) == 0); }
static void call_join(call_t *c) { pthread_join(c->th, NULL); }

static call_t publish(ferry_writer_t *w, uint64_t v) { return (call_t){.w = w, .version = v}; }
static call_t update(ferry_reader_t *r, uint64_t v, uint32_t timeout_ms) {
    return (call_t){.r = r, .version = v, .timeout_ms = timeout_ms};
}

/* Every live member through version v, each call in its own thread. */
static void sync_version(job_t *j, uint64_t v) {
    call_t c[4];
    int n = 0;
    for (int i = 0; i < 2; i++)
        if (j->w[i]) c[n++] = publish(j->w[i], v);
    for (int i = 0; i < 2; i++)
        if (j->r[i]) c[n++] = update(j->r[i], v, HANG_GUARD_MS);
    for (int i = 0; i < n; i++) call_start(&c[i]);
    for (int i = 0; i < n; i++) call_join(&c[i]);
    for (int i = 0; i < n; i++) {
        if (c[i].st != FERRY_OK) {
            fprintf(stderr, "version %llu: %s failed: %s\n", (unsigned long long)v, c[i].w ? "publish" : "update",
                    c[i].err);
            exit(1);
        }
        if (c[i].r) CHECK_EQ_INT(c[i].upd.version, v);
    }
}

/* The detail names the member: role and rank, host, pid, that it left. */
static void check_names(const char *what, const char *detail, const char *member) {
    char member_host[300];
    snprintf(member_host, sizeof member_host, "%s (host %s, pid %s", member, host, pid_text);
    if (getenv("TEST_VERBOSE")) printf("  %s: %s\n", what, detail);
    if (!strstr(detail, member_host) || !strstr(detail, "left")) {
        fprintf(stderr, "%s: expected the detail to name %s that left, got: %s\n", what, member_host, detail);
        exit(1);
    }
}

/* ---- the cases ------------------------------------------------------------------ */

static void writer_leaves(uint32_t victim) {
    uint32_t other = 1 - victim;
    char victim_name[32], other_name[32];
    snprintf(victim_name, sizeof victim_name, "writer %u", victim);
    snprintf(other_name, sizeof other_name, "writer %u", other);
    job_t j;
    job_start(&j, HANG_GUARD_MS);
    for (uint32_t i = 0; i < 2; i++) writer_start(&j, i);
    for (uint32_t i = 0; i < 2; i++) reader_start(&j, i, true);
    sync_version(&j, 1);

    /* the survivor's publish of a version nobody can read returns at its
     * timeout: that expiry is the case (nothing else has to happen within
     * it), so the survivor comes back with a short one (before the victim
     * leaves: it hears of that from the service) */
    ferry_writer_destroy(j.w[other]);
    j.writer_timeout_ms = 2000;
    writer_start(&j, other);
    ferry_writer_destroy(j.w[victim]);
    j.w[victim] = NULL;
    log_clear();
    /* readers wait for exactly version 2; the survivor publishes it, nobody
     * can read it, its publish returns at its timeout and lets it go */
    call_t r[2] = {update(j.r[0], 2, HANG_GUARD_MS), update(j.r[1], 2, HANG_GUARD_MS)};
    call_t w = publish(j.w[other], 2);
    for (int i = 0; i < 2; i++) call_start(&r[i]);
    call_start(&w);
    call_join(&w);
    for (int i = 0; i < 2; i++) call_join(&r[i]);
    CHECK_OK(w.st, w.err);
    CHECK_EQ_INT(w.pub.readers_acked, 0);
    if (getenv("TEST_VERBOSE")) printf("  log:\n%s", log_text);
    for (int i = 0; i < 2; i++) {
        if (r[i].st != FERRY_ERR_STALE) {
            fprintf(stderr, "reader %d: expected STALE for version 2, got %s: %s\n", i, ferry_status_name(r[i].st),
                    r[i].err);
            exit(1);
        }
        check_names("reader asking for version 2", r[i].err, victim_name);
    }
    /* the survivor's publish succeeded, but nobody could read the version:
     * its log says why */
    if (!log_has(other_name, "version 2", victim_name)) {
        fprintf(stderr, "%s's publish of version 2 (never ready): no log line names %s:\n%s", other_name, victim_name,
                log_text);
        exit(1);
    }
    /* the next version: a timeout naming the writer that left */
    call_t n = update(j.r[0], FERRY_VERSION_NEXT, 500);
    call_main(&n);
    CHECK_FAILS(n.st, FERRY_ERR_TIMEOUT, n.err, "no version");
    check_names("reader waiting for the next version", n.err, victim_name);

    /* the writer comes back (both with a long timeout): everyone moves on */
    ferry_writer_destroy(j.w[other]);
    j.writer_timeout_ms = HANG_GUARD_MS;
    writer_start(&j, victim);
    writer_start(&j, other);
    sync_version(&j, 3);
    job_end(&j);
}

static void reader_leaves_before_commit(void) {
    job_t j;
    job_start(&j, 1000); /* the publish waits this long for the layouts: its expiry is the case */
    for (uint32_t i = 0; i < 2; i++) writer_start(&j, i);
    reader_start(&j, 0, true);
    reader_start(&j, 1, false);
    ferry_reader_destroy(j.r[1]);
    j.r[1] = NULL;
    call_t w = publish(j.w[0], 1);
    call_main(&w);
    CHECK_FAILS(w.st, FERRY_ERR_TIMEOUT, w.err, "reader 1");
    check_names("writer waiting for the layouts", w.err, "reader 1");
    CHECK(strstr(w.err, "before committing"));
    job_end(&j);
}

static void reader_leaves_mid_job(void) {
    job_t j;
    job_start(&j, 60000); /* a hang guard: every publish is acknowledged or told who left */
    for (uint32_t i = 0; i < 2; i++) writer_start(&j, i);
    for (uint32_t i = 0; i < 2; i++) reader_start(&j, i, true);
    sync_version(&j, 1);
    ferry_reader_destroy(j.r[1]);
    j.r[1] = NULL;
    log_clear();
    sync_version(&j, 2); /* a live reader less: the publishes wait for reader 0 only */
    if (getenv("TEST_VERBOSE")) printf("  log:\n%s", log_text);
    if (!log_has("writer 0", "version 2", "reader 1 (host") || !log_has("writer 1", "version 2", "reader 1 (host")) {
        fprintf(stderr, "publish of version 2 after reader 1 left: the writers' logs do not name it:\n%s", log_text);
        exit(1);
    }
    job_end(&j);
}

int main(void) {
    ferry_ctx_params_t cp = {.field_mask = FERRY_CTX_PARAM_LOG_FN | FERRY_CTX_PARAM_LOG_LEVEL,
                             .log_fn = log_fn,
                             .log_level = FERRY_LOG_WARN};
    CHECK_OK(ferry_ctx_create(&cp, &ctx, NULL, 0), "ctx");
    const char *cfg = "{\"model_type\":\"qwen3\",\"hidden_size\":128,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":512,"
                      "\"intermediate_size\":256,\"tie_word_embeddings\":true}";
    CHECK_OK(ferry_model_from_hf_config(ctx, "blame-qwen3", cfg, strlen(cfg), NULL, &model), ferry_ctx_error(ctx));
    src = build_layout(ctx, model, FERRY_SIDE_TRAIN, "tp=2");
    dst = build_layout(ctx, model, FERRY_SIDE_INFER, "tp=2");
    gethostname(host, sizeof host - 1);
    snprintf(pid_text, sizeof pid_text, "%d", (int)getpid());

    writer_leaves(0);
    writer_leaves(1);
    reader_leaves_before_commit();
    reader_leaves_mid_job();

    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(model);
    ferry_ctx_destroy(ctx);
    printf("test_sync_blame: writer 0 and writer 1 leaving are named by the readers' refusals and timeouts and the "
           "survivor's log; a reader leaving before committing and mid-job is named to the writers\n");
    return 0;
}
